"""Jobs: the one path by which work is queued, executed (by a Celery worker or in-process) and stored."""

from cuda_agent.jobs.registry import JOB_SPECS, JobContext, JobSpec
from cuda_agent.jobs.runner import (
    JobFailed,
    JobNotFound,
    TenantLimitExceeded,
    active_jobs,
    cancel_job,
    create_job,
    dispatch,
    get_job,
    run_job,
    run_to_result,
    submit_job,
    wait_for_job,
)

__all__ = [
    "JOB_SPECS",
    "JobContext",
    "JobFailed",
    "JobNotFound",
    "JobSpec",
    "TenantLimitExceeded",
    "active_jobs",
    "cancel_job",
    "create_job",
    "dispatch",
    "get_job",
    "run_job",
    "run_to_result",
    "submit_job",
    "wait_for_job",
]
