"""What a tenant's verifications left behind: the problems it worked on, every candidate verified on each, and a
candidate's files. Read by the problem page of the dashboard and by any client of agent_svc."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from cuda_agent.contracts.candidate import CandidateForm
from cuda_agent.contracts.common import EvalStatus


class VerifiedCandidate(BaseModel):
    """One verification of a candidate on a problem (an evaluate job, the agent's `verify` included)."""

    candidate_key: str = Field(description="The candidate's content key: GET /v1/candidates/{candidate_key}.")
    eval_job_id: str | None
    verified_at: datetime
    status: EvalStatus
    correct: bool
    reward: float | None
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None


class ProblemSummary(BaseModel):
    id: str
    name: str | None
    first_seen: datetime = Field(description="When the platform first recorded this problem (any tenant).")
    verifications: int = Field(description="Your verifications on it.")
    best_speedup: float | None = Field(description="Best speedup vs eager of your correct candidates on it.")


class ProblemDetail(ProblemSummary):
    source: str
    candidates: list[VerifiedCandidate] = Field(description="One page of your verifications on it, oldest first.")


class CandidateDetail(BaseModel):
    key: str
    form: CandidateForm
    files: dict[str, str]
    problem_id: str | None = Field(description="The problem it was first recorded for.")
