"""A tenant's jobs as a list: what the dashboard's job table and any client polling many jobs read."""

from __future__ import annotations

from sqlalchemy import select

from cuda_agent.contracts.common import JobKind, JobStatus
from cuda_agent.db import session_scope
from cuda_agent.db.models import Job


def list_jobs(
    tenant: str, offset: int, limit: int, kind: JobKind | None = None, status: JobStatus | None = None
) -> list[Job]:
    """The tenant's jobs, newest first, optionally of one kind and one status."""
    query = select(Job).where(Job.tenant == tenant)
    if kind is not None:
        query = query.where(Job.kind == kind)
    if status is not None:
        query = query.where(Job.status == status)
    with session_scope() as session:
        return list(session.scalars(query.order_by(Job.created_at.desc(), Job.id).offset(offset).limit(limit)))
