"""compile_svc Celery tasks (queue `compile`)."""

from cuda_agent.contracts.common import JobKind
from cuda_agent.queue.tasks import job_task

build = job_task(JobKind.COMPILE)
