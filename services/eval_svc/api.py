"""eval_svc HTTP adapter."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query
from starlette.responses import JSONResponse

from cuda_agent.api import create_app
from cuda_agent.api.auth import TenantDep
from cuda_agent.api.deps import IdempotencyKeyDep
from cuda_agent.api.scope import artifact_visible
from cuda_agent.api.submit import submit_and_respond
from cuda_agent.contracts.common import JobKind
from cuda_agent.contracts.eval import EvalRequest, ProfileRequest

router = APIRouter(tags=["eval"])


def _check_artifact(artifact_key: str | None, tenant: str) -> None:
    """A request may name only an artifact its tenant built: the worker would otherwise load another tenant's
    build into the candidate's process."""
    if artifact_key is not None and not artifact_visible(artifact_key, tenant):
        raise HTTPException(
            422,
            f"artifact_key: no artifact {artifact_key} was built by a compile job of tenant {tenant}",
        )


@router.post("/evaluate")
def evaluate(
    body: EvalRequest,
    tenant: TenantDep,
    idempotency_key: IdempotencyKeyDep = None,
    wait_s: float = Query(0.0, ge=0, le=600),
) -> JSONResponse:
    """Verify and time a candidate against the problem's eager and torch.compile baselines."""
    _check_artifact(body.artifact_key, tenant)
    return submit_and_respond(JobKind.EVALUATE, body, wait_s=wait_s, idempotency_key=idempotency_key, tenant=tenant)


@router.post("/profile")
def profile(
    body: ProfileRequest,
    tenant: TenantDep,
    idempotency_key: IdempotencyKeyDep = None,
    wait_s: float = Query(0.0, ge=0, le=600),
) -> JSONResponse:
    """Profile the candidate's kernels with Nsight Compute (one at a time per GPU)."""
    _check_artifact(body.artifact_key, tenant)
    return submit_and_respond(JobKind.PROFILE, body, wait_s=wait_s, idempotency_key=idempotency_key, tenant=tenant)


app = create_app("eval", [router])
