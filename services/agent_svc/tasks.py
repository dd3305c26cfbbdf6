"""agent_svc Celery tasks (queue `rollout`)."""

from cuda_agent.contracts.common import JobKind
from cuda_agent.queue.tasks import job_task

optimize = job_task(JobKind.OPTIMIZE)
