"""The compile job: the library call behind the `compile` queue, and the row it leaves in the database."""

from __future__ import annotations

from sqlalchemy.orm import Session

from cuda_agent.candidates import record_candidate
from cuda_agent.compile.builder import compile_candidate
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.db.models import CompileResultRow, Job
from cuda_agent.jobs.registry import JobContext


def compile_job(request: CompileRequest, _context: JobContext) -> CompileResult:
    return compile_candidate(request)


def store_compile_result(session: Session, job: Job, request: CompileRequest, result: CompileResult) -> None:
    candidate = record_candidate(session, request.candidate)
    session.add(
        CompileResultRow(
            job_id=job.id,
            candidate_id=candidate.id,
            cache_key=result.cache_key,
            status=result.status,
            artifact_key=result.artifact_key,
            duration_s=result.duration_s,
            diagnostics=[d.model_dump(mode="json") for d in result.diagnostics],
            resources=[r.model_dump(mode="json") for r in result.resources],
            log=result.log,
        )
    )
