"""eval_svc Celery tasks (queues `eval` and `profile`, both GPU-bound)."""

from cuda_agent.contracts.common import JobKind
from cuda_agent.queue.tasks import job_task

evaluate = job_task(JobKind.EVALUATE)
profile = job_task(JobKind.PROFILE)
