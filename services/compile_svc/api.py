"""compile_svc HTTP adapter."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query, Response
from starlette.responses import JSONResponse

from cuda_agent.api import create_app
from cuda_agent.api.auth import TenantDep
from cuda_agent.api.deps import ArtifactKey, IdempotencyKeyDep
from cuda_agent.api.scope import artifact_visible
from cuda_agent.api.submit import submit_and_respond
from cuda_agent.compile import ArtifactError, pack_artifact
from cuda_agent.contracts.common import JobKind
from cuda_agent.contracts.compile import CompileRequest

router = APIRouter(tags=["compile"])


@router.post("/compile")
def compile_candidate(
    body: CompileRequest,
    tenant: TenantDep,
    idempotency_key: IdempotencyKeyDep = None,
    wait_s: float = Query(30.0, ge=0, le=600),
) -> JSONResponse:
    """Build a candidate in the sandbox; waits up to wait_s, else returns the job to poll."""
    return submit_and_respond(JobKind.COMPILE, body, wait_s=wait_s, idempotency_key=idempotency_key, tenant=tenant)


@router.get("/artifacts/{artifact_key}")
def download_artifact(artifact_key: ArtifactKey, tenant: TenantDep) -> Response:
    """A built artifact as tar.gz, for GPU workers on other hosts (service key) and the tenants that built it."""
    not_found = HTTPException(status_code=404, detail=f"artifact {artifact_key} not found")
    if not artifact_visible(artifact_key, tenant):
        raise not_found  # the same answer as for no artifact at all: another tenant's existence is not disclosed
    try:
        data = pack_artifact(artifact_key)
    except ArtifactError:
        raise not_found from None
    return Response(content=data, media_type="application/gzip")


app = create_app("compile", [router])
