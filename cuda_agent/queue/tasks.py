"""Celery task declarations: each job kind becomes one task that runs ``run_job`` for a job id."""

from __future__ import annotations

from celery import Task

from cuda_agent.contracts.common import JobKind
from cuda_agent.jobs import JOB_SPECS, run_job
from cuda_agent.queue.app import celery_app


def job_task(kind: JobKind) -> Task:
    """Declare the Celery task of ``kind``. The task body is the plain, idempotent ``run_job``."""
    spec = JOB_SPECS[kind]

    def execute(job_id: str) -> None:
        run_job(job_id)

    execute.__name__ = execute.__qualname__ = spec.task_name.replace(".", "_")
    execute.__doc__ = f"Run a {kind.value} job."
    return celery_app.task(name=spec.task_name)(execute)


# Probes may be sent through any queue, so their task belongs to no single service.
probe = job_task(JobKind.PROBE)
