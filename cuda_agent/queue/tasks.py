"""The Celery tasks, one per job kind of the registry (cuda_agent.jobs.registry), each running ``run_job`` for a
job id. A task's name is its registry entry's ``task_name``: messages already queued name their task that way."""

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


TASKS: dict[JobKind, Task] = {kind: job_task(kind) for kind in JOB_SPECS}
