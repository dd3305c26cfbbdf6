"""job leases, dispatch time, idempotency digest

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 02:35:00.000000
"""

import hashlib
import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

jobs = sa.table(
    "jobs",
    sa.column("id", sa.String),
    sa.column("kind", sa.String),
    sa.column("tenant", sa.String),
    sa.column("idempotency_key", sa.String),
    sa.column("idempotency_digest", sa.String),
)


def _digest(tenant: str | None, kind: str, key: str) -> str:
    # Must stay equal to cuda_agent.jobs.runner.idempotency_digest, so a client retry across the upgrade still
    # finds its job (a migration must not import application code that later changes).
    return hashlib.sha256(json.dumps([tenant, kind, key]).encode()).hexdigest()


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("idempotency_digest", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("lease_owner", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))

    # Old keys were "<tenant or ->:<client key>" for keyed jobs and "<kind>:<uuid>" for the others. A keyed job gets
    # the digest its client key now maps to; the others get none (NULL is what a keyless job stores now).
    bind = op.get_bind()
    set_digest = jobs.update().where(jobs.c.id == sa.bindparam("job_id"))
    set_digest = set_digest.values(idempotency_digest=sa.bindparam("digest"))
    rows = bind.execute(
        sa.select(jobs.c.id, jobs.c.kind, jobs.c.tenant, jobs.c.idempotency_key).execution_options(yield_per=5000)
    )
    for batch in rows.partitions():  # streamed: the table may be large
        updates = []
        for job_id, kind, tenant, old_key in batch:
            prefix = f"{tenant or '-'}:"
            if old_key.startswith(prefix):
                updates.append({"job_id": job_id, "digest": _digest(tenant, str(kind), old_key[len(prefix) :])})
        if updates:
            bind.execute(set_digest, updates)

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("idempotency_key")
        batch_op.create_unique_constraint("uq_jobs_idempotency_digest", ["idempotency_digest"])
    # Artifact downloads are scoped by "a compile result of this tenant's jobs built it": looked up by key.
    op.create_index("ix_compile_results_artifact_key", "compile_results", ["artifact_key"])
    # RUNNING rows from before leases have no lease: the sweeper treats them as dead attempts and recovers them
    # (the old runner left such jobs running forever after a worker died).


def downgrade() -> None:
    op.drop_index("ix_compile_results_artifact_key", table_name="compile_results")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("idempotency_key", sa.String(length=128), nullable=True))
    # A digest cannot be turned back into its key; keyless jobs get their id, which is unique as the column needs.
    op.execute(jobs.update().values(idempotency_key=sa.func.coalesce(jobs.c.idempotency_digest, jobs.c.id)))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column("idempotency_key", existing_type=sa.String(length=128), nullable=False)
        batch_op.create_unique_constraint("jobs_idempotency_key_key", ["idempotency_key"])
        batch_op.drop_constraint("uq_jobs_idempotency_digest", type_="unique")
        batch_op.drop_column("lease_expires_at")
        batch_op.drop_column("lease_owner")
        batch_op.drop_column("dispatched_at")
        batch_op.drop_column("idempotency_digest")
