"""The evaluate and profile jobs: the library calls behind the `eval` and `profile` queues, and their rows."""

from __future__ import annotations

from sqlalchemy.orm import Session

from cuda_agent.candidates import record_candidate, record_problem
from cuda_agent.contracts.candidate import CandidateForm
from cuda_agent.contracts.common import CompileStatus, EvalStatus
from cuda_agent.contracts.eval import EvalRequest, EvalResult, ProfileRequest, ProfileResult
from cuda_agent.db.models import EvalResultRow, Job
from cuda_agent.eval import evaluate, profile_candidate
from cuda_agent.eval.reward import failure_reward
from cuda_agent.jobs.registry import JobContext
from cuda_agent.verify import LocalBackend, verify_candidate


def evaluate_job(request: EvalRequest, _context: JobContext) -> EvalResult:
    """A project candidate sent without a build is built here first, through the one compile-then-verify flow; a
    build the candidate broke is its verdict (-1), a build the sandbox broke is an infrastructure fault."""
    if request.artifact_key is not None or request.candidate.form is CandidateForm.KERNELBENCH:
        return evaluate(request)
    compiled, verdict = verify_candidate(request.problem_source, request.candidate, request, LocalBackend())
    if verdict is not None:
        return verdict
    status = EvalStatus.SANDBOX_ERROR if compiled.status is CompileStatus.SANDBOX_ERROR else EvalStatus.RUNTIME_ERROR
    return EvalResult(
        status=status,
        correct=False,
        reward=failure_reward(status),
        message=f"the candidate did not build ({compiled.status.value}): {compiled.message}"[:4000],
        fault="infrastructure" if status is EvalStatus.SANDBOX_ERROR else "candidate",
    )


def profile_job(request: ProfileRequest, _context: JobContext) -> ProfileResult:
    return profile_candidate(request)


def store_eval_result(session: Session, job: Job, request: EvalRequest, result: EvalResult) -> None:
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
