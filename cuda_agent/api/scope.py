"""Which tenant may see which artifact. Jobs and trajectories carry their tenant and are filtered by it where they
are read (cuda_agent.jobs.get_job, cuda_agent.agent.jobs.load_trajectory); an artifact is content-addressed and
shared by every identical build, so it belongs to each tenant with a compile job that produced it."""

from __future__ import annotations

from sqlalchemy import select

from cuda_agent.api.auth import SERVICE_TENANT
from cuda_agent.db import session_scope
from cuda_agent.db.models import CompileResultRow, Job
from cuda_agent.settings import get_settings


def artifact_visible(artifact_key: str, tenant: str) -> bool:
    """True when a compile job of ``tenant`` produced the artifact (a cache hit counts), for the workers' service
    key, and for everyone on a single-user setup (auth off)."""
    if tenant == SERVICE_TENANT or not get_settings().auth_required:
        return True
    with session_scope() as session:
        owned = (
            select(CompileResultRow.id)
            .join(Job, Job.id == CompileResultRow.job_id)
            .where(CompileResultRow.artifact_key == artifact_key, Job.tenant == tenant)
            .limit(1)
        )
        return session.scalars(owned).first() is not None
