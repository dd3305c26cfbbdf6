"""agent_svc HTTP adapter: the product's front door."""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks, HTTPException, status
from fastapi.responses import PlainTextResponse
from pydantic import ValidationError
from starlette.responses import JSONResponse

from cuda_agent.agent.jobs import load_trajectory
from cuda_agent.agent.policies import names_an_endpoint, with_policy
from cuda_agent.agent.policies.openai_policy import resolve_endpoint
from cuda_agent.api import create_app
from cuda_agent.api.auth import TenantDep
from cuda_agent.api.deps import IdempotencyKeyDep, ObjectId, OffsetQuery, SettingsDep, page_limit
from cuda_agent.api.submit import submit_and_respond
from cuda_agent.contracts.agent import RolloutRequest, Trajectory
from cuda_agent.contracts.common import JobKind
from cuda_agent.contracts.verified import CandidateDetail, ProblemDetail, ProblemSummary
from cuda_agent.settings import ConfigError
from cuda_agent.verified import candidate_detail, list_problems, problem_detail

router = APIRouter(tags=["agent"])

LimitQuery = page_limit(1000)  # problems and verifications are a few hundred bytes each


@router.post("/optimize", status_code=status.HTTP_202_ACCEPTED)
def optimize(
    body: RolloutRequest,
    tenant: TenantDep,
    settings: SettingsDep,
    background: BackgroundTasks,
    idempotency_key: IdempotencyKeyDep = None,
) -> JSONResponse:
    """Start an agent rollout on a problem; poll GET /v1/jobs/{id} or stream /v1/jobs/{id}/events."""
    try:
        body = with_policy(body)  # the stored job names the policy it runs
    except ValidationError as exc:
        raise HTTPException(422, f"policy_options: {exc.errors()[0]['msg']}") from None
    assert body.policy is not None  # named by with_policy
    if names_an_endpoint(body.policy):  # refused now, not after the job waited in the queue
        try:
            resolve_endpoint(body.policy_options.get("endpoint", "default"), body.policy_options.get("model"))
        except ConfigError as exc:
            raise HTTPException(422, f"policy_options: {exc}") from None
    return submit_and_respond(
        JobKind.OPTIMIZE,
        body,
        wait_s=0,
        idempotency_key=idempotency_key,
        tenant=tenant,
        limit=settings.max_concurrent_jobs,
        background=background,
    )


@router.get("/trajectories/{trajectory_id}")
def read_trajectory(trajectory_id: ObjectId, tenant: TenantDep) -> Trajectory:
    """A rollout's trajectory: every turn, tool call, observation, token ids and reward events."""
    trajectory = load_trajectory(trajectory_id, tenant)
    if trajectory is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"trajectory {trajectory_id} not found")
    return trajectory


@router.get("/trajectories/{trajectory_id}/export", response_class=PlainTextResponse)
def export_trajectory(trajectory_id: ObjectId, tenant: TenantDep) -> PlainTextResponse:
    """The trajectory as one JSONL line, the training-data format."""
    return PlainTextResponse(
        read_trajectory(trajectory_id, tenant).model_dump_json() + "\n", media_type="application/jsonl"
    )


@router.get("/problems")
def read_problems(tenant: TenantDep, offset: OffsetQuery = 0, limit: LimitQuery = 100) -> list[ProblemSummary]:
    """The problems you optimized or verified candidates on, newest first, with your best speedup on each."""
    return list_problems(tenant, offset, limit)


@router.get("/problems/{problem_id}")
def read_problem(
    problem_id: ObjectId, tenant: TenantDep, offset: OffsetQuery = 0, limit: LimitQuery = 500
) -> ProblemDetail:
    """A problem's source and one page of every verification of yours on it, oldest first (speedup over time)."""
    problem = problem_detail(problem_id, tenant, offset, limit)
    if problem is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"problem {problem_id} not found")
    return problem


@router.get("/candidates/{candidate_key}")
def read_candidate(candidate_key: ObjectId, tenant: TenantDep) -> CandidateDetail:
    """A candidate's files by content key (a verification's candidate_key), if a job of yours built or verified it."""
    candidate = candidate_detail(candidate_key, tenant)
    if candidate is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"candidate {candidate_key} not found")
    return candidate


app = create_app("agent", [router])
