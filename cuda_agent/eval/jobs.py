"""The evaluate and profile jobs: the library calls behind the `eval` and `profile` queues, and their rows."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from cuda_agent.candidates import record_candidate, record_problem
from cuda_agent.contracts.common import JobKind
from cuda_agent.contracts.eval import EvalRequest, EvalResult, ProfileRequest
from cuda_agent.db.models import EvalResultRow, Job
from cuda_agent.eval import evaluate, profile_candidate
from cuda_agent.jobs.registry import JobContext, register_handler, register_persister


@register_handler(JobKind.EVALUATE)
def evaluate_job(request: dict[str, Any], _context: JobContext) -> dict[str, Any]:
    return evaluate(EvalRequest.model_validate(request)).model_dump(mode="json")


@register_handler(JobKind.PROFILE)
def profile_job(request: dict[str, Any], _context: JobContext) -> dict[str, Any]:
    return profile_candidate(ProfileRequest.model_validate(request)).model_dump(mode="json")


@register_persister(JobKind.EVALUATE)
def store_eval_result(session: Session, job: Job, document: dict[str, Any]) -> None:
    result = EvalResult.model_validate(document)
    request = EvalRequest.model_validate(job.request)
    problem = record_problem(session, request.problem_source)
    candidate = record_candidate(session, request.candidate, problem_id=problem.id)
    samples = {
        side: timing.samples_ms
        for side, timing in (
            ("candidate", result.candidate_timing),
            ("eager", result.eager_timing),
            ("compile", result.compile_timing),
        )
        if timing is not None
    }
    session.add(
        EvalResultRow(
            job_id=job.id,
            candidate_id=candidate.id,
            problem_id=problem.id,
            status=result.status,
            correct=result.correct,
            reward=result.reward,
            speedup_vs_eager=result.speedup_vs_eager,
            speedup_vs_compile=result.speedup_vs_compile,
            timing_samples=samples,
            fingerprint=result.fingerprint.model_dump(mode="json") if result.fingerprint else {},
            findings=[f.model_dump(mode="json") for f in result.findings],
            detail=result.model_dump(mode="json", exclude={"fingerprint", "findings"}),
        )
    )
