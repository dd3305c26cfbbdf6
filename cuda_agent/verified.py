"""Reads of what a tenant's verifications left behind (problems, verified candidates, candidate files).

Problems and candidates are content-addressed rows shared by every tenant that sent the same text, so neither
carries a tenant: a tenant sees a problem when one of its evaluate jobs or rollouts worked on it, a candidate when
one of its compile or evaluate jobs recorded it, and only its own verifications either way (another tenant's are
not disclosed, not even as a count).
"""

from __future__ import annotations

from sqlalchemy import Subquery, and_, case, func, select, union
from sqlalchemy.orm import Session

from cuda_agent.contracts.candidate import CandidateForm
from cuda_agent.contracts.verified import CandidateDetail, ProblemDetail, ProblemSummary, VerifiedCandidate
from cuda_agent.db import session_scope
from cuda_agent.db.models import Candidate, CompileResultRow, EvalResultRow, Job, Problem
from cuda_agent.db.models import Trajectory as TrajectoryRow


def _tenant_stats(tenant: str) -> Subquery:
    """Per problem (column 0): the tenant's verifications (1) and the best speedup of its correct ones (2)."""
    best = func.max(case((EvalResultRow.correct.is_(True), EvalResultRow.speedup_vs_eager), else_=None))
    return (
        select(EvalResultRow.problem_id, func.count(EvalResultRow.id), best)
        .join(Job, Job.id == EvalResultRow.job_id)
        .where(Job.tenant == tenant, EvalResultRow.problem_id.is_not(None))
        .group_by(EvalResultRow.problem_id)
        .subquery()
    )


def _visible_problem_ids(tenant: str) -> Subquery:
    """The ids (column 0) of the problems the tenant's evaluate jobs or rollouts worked on."""
    evaluated = select(EvalResultRow.problem_id).join(Job, Job.id == EvalResultRow.job_id).where(Job.tenant == tenant)
    rolled_out = select(TrajectoryRow.problem_id).where(TrajectoryRow.tenant == tenant)
    return union(evaluated, rolled_out).subquery()


def list_problems(tenant: str, offset: int, limit: int) -> list[ProblemSummary]:
    """The problems the tenant worked on, newest first, with its verification count and best speedup."""
    with session_scope() as session:
        stats = _tenant_stats(tenant)
        rows = session.execute(
            select(Problem, stats.c[1], stats.c[2])
            .outerjoin(stats, stats.c[0] == Problem.id)
            .where(Problem.id.in_(select(_visible_problem_ids(tenant).c[0])))
            .order_by(Problem.created_at.desc(), Problem.id)
            .offset(offset)
            .limit(limit)
        ).all()
        return [_summary(problem, count, best) for problem, count, best in rows]


def _summary(problem: Problem, count: int | None, best: float | None) -> ProblemSummary:
    return ProblemSummary(
        id=problem.id, name=problem.name, first_seen=problem.created_at, verifications=count or 0, best_speedup=best
    )


def problem_detail(problem_id: str, tenant: str, offset: int, limit: int) -> ProblemDetail | None:
    """The problem with one page of the tenant's verifications on it, oldest first; None when the tenant never
    worked on it (or it does not exist)."""
    with session_scope() as session:
        ids = _visible_problem_ids(tenant)
        visible = session.scalar(select(func.count()).select_from(ids).where(ids.c[0] == problem_id))
        problem = session.get(Problem, problem_id) if visible else None
        if problem is None:
            return None
        per_problem = _tenant_stats(tenant)
        stats = session.execute(select(per_problem).where(per_problem.c[0] == problem_id)).first()
        rows = session.execute(
            select(EvalResultRow, Candidate.code_hash)
            .join(Job, Job.id == EvalResultRow.job_id)
            .join(Candidate, Candidate.id == EvalResultRow.candidate_id)
            .where(Job.tenant == tenant, EvalResultRow.problem_id == problem_id)
            .order_by(EvalResultRow.created_at, EvalResultRow.id)
            .offset(offset)
            .limit(limit)
        ).all()
        summary = _summary(problem, stats[1] if stats else 0, stats[2] if stats else None)
        return ProblemDetail(
            **summary.model_dump(),
            source=problem.source,
            candidates=[
                VerifiedCandidate(
                    candidate_key=key,
                    eval_job_id=row.job_id,
                    verified_at=row.created_at,
                    status=row.status,
                    correct=row.correct,
                    reward=row.reward,
                    speedup_vs_eager=row.speedup_vs_eager,
                    speedup_vs_compile=row.speedup_vs_compile,
                )
                for row, key in rows
            ],
        )


def _recorded_by(session: Session, candidate_id: str, tenant: str) -> bool:
    def by_jobs_of_tenant(result: type[CompileResultRow] | type[EvalResultRow]) -> bool:
        found = session.scalars(
            select(result.id)
            .join(Job, Job.id == result.job_id)
            .where(and_(result.candidate_id == candidate_id, Job.tenant == tenant))
            .limit(1)
        ).first()
        return found is not None

    return by_jobs_of_tenant(CompileResultRow) or by_jobs_of_tenant(EvalResultRow)


def candidate_detail(candidate_key: str, tenant: str) -> CandidateDetail | None:
    """A candidate's files by content key; None unless a compile or evaluate job of the tenant recorded it."""
    with session_scope() as session:
        row = session.scalars(select(Candidate).where(Candidate.code_hash == candidate_key)).first()
        if row is None or not _recorded_by(session, row.id, tenant):
            return None
        return CandidateDetail(
            key=row.code_hash, form=CandidateForm(row.form), files=row.files, problem_id=row.problem_id
        )
