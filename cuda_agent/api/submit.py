"""Submitting a job from a route: accept (202 + job view), or wait a bounded time for small work."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from fastapi import BackgroundTasks, HTTPException, status
from pydantic import BaseModel
from starlette.responses import JSONResponse

from cuda_agent.contracts.common import JobKind
from cuda_agent.contracts.jobs import JobView
from cuda_agent.jobs import TenantLimitExceeded, create_job, dispatch, submit_job, wait_for_job
from cuda_agent.settings import get_settings

# A slot frees when one of the tenant's jobs ends; rollouts take minutes, so polling faster gains nothing.
LIMIT_RETRY_AFTER_S = 30


@contextlib.contextmanager
def tenant_limit_as_429() -> Iterator[None]:
    """A tenant that already has its limit of queued or running jobs gets 429 and when to retry."""
    try:
        yield
    except TenantLimitExceeded as exc:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS, str(exc), headers={"Retry-After": str(LIMIT_RETRY_AFTER_S)}
        ) from None


def submit_and_respond(
    kind: JobKind,
    request: BaseModel,
    *,
    wait_s: float,
    idempotency_key: str | None,
    tenant: str | None = None,
    limit: int | None = None,
    background: BackgroundTasks | None = None,
) -> JSONResponse:
    """200 with the finished job when it ends within ``wait_s``; else 202 with the job to poll; 429 when the
    tenant already has ``limit`` jobs of this kind queued or running.

    With ``background``, a job that runs in-process (the embedded default) runs after the answer is sent, so the
    client can follow a long job (a rollout) instead of waiting for the answer until the job has ended."""
    with tenant_limit_as_429():
        if background is not None and get_settings().embedded:
            job, created = create_job(kind, request, idempotency_key=idempotency_key, tenant=tenant, limit=limit)
            if created:
                background.add_task(dispatch, job)
        else:
            job = submit_job(kind, request, idempotency_key=idempotency_key, tenant=tenant, limit=limit)
    if wait_s > 0:
        with contextlib.suppress(TimeoutError):
            job = wait_for_job(job.id, timeout_s=wait_s)
    view = JobView.model_validate(job)
    return JSONResponse(status_code=200 if view.status.terminal else 202, content=view.model_dump(mode="json"))
