"""trainer_svc HTTP adapter: start training runs, list and read them (status, metrics, checkpoints).

A run is started by a start_training job on the `train` queue, which launches the run's own process and ends; the
run's id is that job's id. Runs are the submitting tenant's: another tenant's run is a 404, as a job is.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from starlette.responses import JSONResponse

from cuda_agent.api import create_app
from cuda_agent.api.auth import TenantDep
from cuda_agent.api.deps import IdempotencyKeyDep, ObjectId, OffsetQuery, SettingsDep, page_limit
from cuda_agent.api.submit import tenant_limit_as_429
from cuda_agent.contracts.common import JobKind
from cuda_agent.contracts.train_runs import RunDetail, RunRequest, RunSummary, StepMetrics
from cuda_agent.jobs import create_job, dispatch
from cuda_agent.train import store

router = APIRouter(tags=["trainer"])

LimitQuery = page_limit(1000)


@router.post("/runs", status_code=status.HTTP_202_ACCEPTED)
def start_run(
    body: RunRequest, tenant: TenantDep, settings: SettingsDep, idempotency_key: IdempotencyKeyDep = None
) -> JSONResponse:
    """Start one stage of a training run; poll GET /v1/runs/{id} for its status, metrics and checkpoints."""
    with tenant_limit_as_429():
        job, created = create_job(
            JobKind.START_TRAINING,
            body,
            idempotency_key=idempotency_key,
            tenant=tenant,
            limit=settings.max_concurrent_jobs,
        )
    # The row exists before the job is dispatched, so the run can be read as soon as its id is returned.
    store.create_run(job.id, body.stage, body.model_dump(mode="json"), tenant=tenant, job_id=job.id)
    if created:
        dispatch(job)
    run = store.get_run(job.id, tenant)
    assert run is not None  # created above, for this tenant
    return JSONResponse(status_code=status.HTTP_202_ACCEPTED, content=run.model_dump(mode="json"))


@router.get("/runs")
def read_runs(tenant: TenantDep, offset: OffsetQuery = 0, limit: LimitQuery = 100) -> list[RunSummary]:
    """Your training runs, newest first, with their latest metrics."""
    return store.list_runs(tenant, offset, limit)


@router.get("/runs/{run_id}")
def read_run(run_id: ObjectId, tenant: TenantDep) -> RunDetail:
    """A run: status, latest metrics, configuration and checkpoints."""
    run = store.get_run(run_id, tenant)
    if run is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"run {run_id} not found")
    return run


@router.get("/runs/{run_id}/steps")
def read_run_steps(
    run_id: ObjectId, tenant: TenantDep, offset: OffsetQuery = 0, limit: LimitQuery = 100
) -> list[StepMetrics]:
    """One page of a run's per-step metrics, oldest first."""
    steps = store.run_steps(run_id, tenant, offset, limit)
    if steps is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"run {run_id} not found")
    return steps


app = create_app("trainer", [router])
