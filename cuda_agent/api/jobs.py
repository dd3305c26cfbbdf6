"""Job routes every service serves: read, cancel, and probe a queue end to end."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import StreamingResponse

from cuda_agent.api.auth import SERVICE_TENANT, TenantDep
from cuda_agent.api.deps import IdempotencyKeyDep, ObjectId, OffsetQuery
from cuda_agent.contracts.common import JobKind, JobStatus
from cuda_agent.contracts.jobs import JobView, ProbeRequest
from cuda_agent.jobs import cancel_job, get_job, submit_job
from cuda_agent.jobs.listing import list_jobs

jobs_router = APIRouter(tags=["jobs"])
EVENT_POLL_S = 0.5  # the database is the source of truth; polling it keeps the stream correct across replicas
# A job carries its result (an optimize job's: the best candidate's files). Spelled out rather than
# deps.page_limit(100), whose value mypy cannot take as a type in this checked package.
LimitQuery = Annotated[int, Query(ge=1, le=100)]


@jobs_router.get("/jobs")
def read_jobs(
    tenant: TenantDep,
    kind: JobKind | None = None,
    state: Annotated[JobStatus | None, Query(alias="status")] = None,
    offset: OffsetQuery = 0,
    limit: LimitQuery = 50,
) -> list[JobView]:
    """Your jobs, newest first, optionally of one kind and one status."""
    return [JobView.model_validate(job) for job in list_jobs(tenant, offset, limit, kind=kind, status=state)]


@jobs_router.get("/jobs/{job_id}")
def read_job(job_id: ObjectId, tenant: TenantDep) -> JobView:
    """Status, progress and result of a job."""
    return JobView.model_validate(get_job(job_id, tenant))


@jobs_router.get("/jobs/{job_id}/events")
def job_events(job_id: ObjectId, tenant: TenantDep) -> StreamingResponse:
    """Server-sent events: the job's view each time its status or progress changes, until it finishes."""
    get_job(job_id, tenant)  # 404 before the stream starts

    def stream() -> Iterator[str]:
        last = None
        while True:
            view = JobView.model_validate(get_job(job_id, tenant))
            state = (view.status, view.progress, view.attempts)
            if state != last:
                last = state
                yield f"event: {view.status.value}\ndata: {view.model_dump_json()}\n\n"
            if view.status.terminal:
                return
            time.sleep(EVENT_POLL_S)

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@jobs_router.post("/jobs/{job_id}/cancel")
def cancel(job_id: ObjectId, tenant: TenantDep) -> JobView:
    """Ask a job to stop."""
    return JobView.model_validate(cancel_job(job_id, tenant))


# A probe that sleeps holds a worker (a GPU one on the eval queue): tenants get a hold no longer than a short
# evaluation (long enough for the selftest's kill drills on a loaded host), the operator's service key any hold up
# to the contract's bound.
TENANT_PROBE_SLEEP_S = 30.0


@jobs_router.post("/probe", status_code=status.HTTP_202_ACCEPTED)
def probe(body: ProbeRequest, tenant: TenantDep, idempotency_key: IdempotencyKeyDep = None) -> JobView:
    """Send a probe job through a queue; its result proves a worker of that queue runs and stores results."""
    if body.sleep_s > TENANT_PROBE_SLEEP_S and tenant != SERVICE_TENANT:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"sleep_s above {TENANT_PROBE_SLEEP_S:.0f} s needs the service key"
        )
    job = submit_job(JobKind.PROBE, body, idempotency_key=idempotency_key, tenant=tenant, queue=body.queue)
    return JobView.model_validate(job)
