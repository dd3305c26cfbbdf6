"""Submitting a job from a route: accept (202 + job view), or wait a bounded time for small work."""

from __future__ import annotations

import contextlib

from pydantic import BaseModel
from starlette.responses import JSONResponse

from cuda_agent.contracts.common import JobKind, JobStatus
from cuda_agent.contracts.jobs import JobView
from cuda_agent.jobs import submit_job, wait_for_job


def submit_and_respond(
    kind: JobKind,
    request: BaseModel,
    *,
    wait_s: float,
    idempotency_key: str | None,
    tenant: str | None = None,
) -> JSONResponse:
    """200 with the finished job when it ends within ``wait_s``; else 202 with the job to poll."""
    job = submit_job(kind, request, idempotency_key=idempotency_key, tenant=tenant)
    if wait_s > 0:
        with contextlib.suppress(TimeoutError):
            job = wait_for_job(job.id, timeout_s=wait_s)
    view = JobView.model_validate(job)
    finished = view.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
    return JSONResponse(status_code=200 if finished else 202, content=view.model_dump(mode="json"))
