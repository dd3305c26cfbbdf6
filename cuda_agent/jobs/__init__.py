"""Jobs: the one path by which work is queued, executed (by a Celery worker or in-process) and stored."""

from cuda_agent.jobs.registry import JOB_SPECS, JobSpec, register_handler
from cuda_agent.jobs.runner import JobNotFound, cancel_job, get_job, run_job, submit_job, wait_for_job

__all__ = [
    "JOB_SPECS",
    "JobNotFound",
    "JobSpec",
    "cancel_job",
    "get_job",
    "register_handler",
    "run_job",
    "submit_job",
    "wait_for_job",
]
