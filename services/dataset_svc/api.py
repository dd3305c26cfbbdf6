"""dataset_svc HTTP adapter: synthesis jobs and reads of the stored datasets.

A dataset belongs to the tenant whose synthesis made it: only that tenant lists and reads it (another tenant gets
404, as for jobs); datasets made with the CLI are the operator's and not served here.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from starlette.responses import JSONResponse

from cuda_agent.api import create_app
from cuda_agent.api.auth import TenantDep
from cuda_agent.api.deps import IdempotencyKeyDep, ObjectId, OffsetQuery, SettingsDep, page_limit
from cuda_agent.api.submit import submit_and_respond
from cuda_agent.contracts.common import JobKind
from cuda_agent.contracts.dataset import DatasetDetail, DatasetProblemsPage, DatasetSummary, SynthesizeRequest
from cuda_agent.dataset.store import dataset_detail, dataset_problems, list_datasets

router = APIRouter(tags=["dataset"])

LimitQuery = page_limit(500)  # problems carry their code (up to a few KB each)


@router.post("/datasets", status_code=status.HTTP_202_ACCEPTED)
def synthesize(
    body: SynthesizeRequest, tenant: TenantDep, settings: SettingsDep, idempotency_key: IdempotencyKeyDep = None
) -> JSONResponse:
    """Synthesize N problems into a dataset; poll GET /v1/jobs/{id} for progress (kept/requested) and its id."""
    return submit_and_respond(
        JobKind.SYNTHESIZE_DATASET,
        body,
        wait_s=0,
        idempotency_key=idempotency_key,
        tenant=tenant,
        limit=settings.max_concurrent_jobs,
    )


@router.get("/datasets")
def read_datasets(tenant: TenantDep, offset: OffsetQuery = 0, limit: LimitQuery = 100) -> list[DatasetSummary]:
    """Datasets, oldest first, with their problem counts and statistics."""
    return list_datasets(tenant, offset, limit)


@router.get("/datasets/{dataset_id}")
def read_dataset(dataset_id: ObjectId, tenant: TenantDep) -> DatasetDetail:
    """A dataset's statistics: removals by stage and reason, the op-count distribution next to the paper's."""
    detail = dataset_detail(dataset_id, tenant)
    if detail is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"dataset {dataset_id} not found")
    return detail


@router.get("/datasets/{dataset_id}/problems")
def read_dataset_problems(
    dataset_id: ObjectId, tenant: TenantDep, offset: OffsetQuery = 0, limit: LimitQuery = 100
) -> DatasetProblemsPage:
    """One page of a dataset's problems (code, ops, data source, the filters they passed)."""
    page = dataset_problems(dataset_id, tenant, offset, limit)
    if page is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"dataset {dataset_id} not found")
    return page


app = create_app("dataset", [router])
