"""The compile job: the library call behind the `compile` queue, and the row it leaves in the database."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from cuda_agent.candidates import record_candidate
from cuda_agent.compile.builder import compile_candidate
from cuda_agent.contracts.common import JobKind
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.db.models import CompileResultRow, Job
from cuda_agent.jobs.registry import JobContext, register_handler, register_persister


@register_handler(JobKind.COMPILE)
def compile_job(request: dict[str, Any], _context: JobContext) -> dict[str, Any]:
    return compile_candidate(CompileRequest.model_validate(request)).model_dump(mode="json")


@register_persister(JobKind.COMPILE)
def store_compile_result(session: Session, job: Job, document: dict[str, Any]) -> None:
    result = CompileResult.model_validate(document)
    candidate = record_candidate(session, CompileRequest.model_validate(job.request).candidate)
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
