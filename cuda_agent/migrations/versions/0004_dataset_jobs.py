"""job kinds synthesize_dataset and measure_problem; datasets.tenant

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 06:45:00.000000

On Postgres `job_kind` is a native enum type: the values are added to it. On SQLite the enum is not native (db/models.py
`_enum`): the column is a VARCHAR as long as the longest value, with no CHECK constraint (SQLAlchemy creates none
by default), so any value is stored already; the column is widened anyway so its declared type is the one the
models declare.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out, not imported from cuda_agent.contracts: a migration must not change when application code does.
OLD_KINDS = ("probe", "compile", "evaluate", "profile", "optimize")
NEW_KINDS = ("synthesize_dataset", "measure_problem")


def upgrade() -> None:
    # NULL for every existing row: datasets made before tenants could synthesize are the operator's.
    op.add_column("datasets", sa.Column("tenant", sa.String(length=64), nullable=True))
    op.create_index(op.f("ix_datasets_tenant"), "datasets", ["tenant"], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        # A value added by ALTER TYPE cannot be used in the transaction that added it (and before Postgres 12 the
        # statement cannot run in a transaction at all): commit it on its own.
        with op.get_context().autocommit_block():
            for kind in NEW_KINDS:
                op.execute(f"ALTER TYPE job_kind ADD VALUE IF NOT EXISTS '{kind}'")
        return
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column(
            "kind",
            existing_type=sa.Enum(*OLD_KINDS, name="job_kind"),
            type_=sa.Enum(*OLD_KINDS, *NEW_KINDS, name="job_kind"),
            existing_nullable=False,
        )


def downgrade() -> None:
    op.drop_index(op.f("ix_datasets_tenant"), table_name="datasets")
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_column("tenant")
    # Jobs of the new kinds cannot be represented by the old type: they go (their datasets stay).
    jobs = sa.table("jobs", sa.column("kind", sa.String))
    op.execute(jobs.delete().where(sa.cast(jobs.c.kind, sa.String).in_(NEW_KINDS)))
    if op.get_bind().dialect.name == "postgresql":
        # Postgres cannot drop a value from an enum type: the column moves to a new type of the old values.
        op.execute("ALTER TYPE job_kind RENAME TO job_kind_0004")
        sa.Enum(*OLD_KINDS, name="job_kind").create(op.get_bind())
        op.execute("ALTER TABLE jobs ALTER COLUMN kind TYPE job_kind USING kind::text::job_kind")
        op.execute("DROP TYPE job_kind_0004")
        return
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column(
            "kind",
            existing_type=sa.Enum(*OLD_KINDS, *NEW_KINDS, name="job_kind"),
            type_=sa.Enum(*OLD_KINDS, name="job_kind"),
            existing_nullable=False,
        )
