"""training runs: tenant, launcher, status detail, per-step metrics; job kind start_training

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 06:50:00.000000

A training run is a process of its own (torchrun, a k8s Job) that outlives the start_training job which launched
it: the run's row carries who owns it, where it runs and how it ended, and `training_steps` one row of metrics per
optimizer step. The job kind is added as 0004 adds its kinds (see there for the SQLite side).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out, not imported from cuda_agent.contracts: a migration must not change when application code does.
OLD_KINDS = ("probe", "compile", "evaluate", "profile", "optimize", "synthesize_dataset", "measure_problem")
NEW_KINDS = ("start_training",)
JSON_DOC = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # As in 0004: a value added by ALTER TYPE is committed on its own before it can be used.
        with op.get_context().autocommit_block():
            for kind in NEW_KINDS:
                op.execute(f"ALTER TYPE job_kind ADD VALUE IF NOT EXISTS '{kind}'")
    else:
        with op.batch_alter_table("jobs", schema=None) as batch_op:
            batch_op.alter_column(
                "kind",
                existing_type=sa.Enum(*OLD_KINDS, name="job_kind"),
                type_=sa.Enum(*OLD_KINDS, *NEW_KINDS, name="job_kind"),
                existing_nullable=False,
            )
    with op.batch_alter_table("training_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tenant", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("job_id", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("run_dir", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("launcher", sa.String(length=200), nullable=True))
        # Rows from before this revision (never launched: nothing used the table) start at step 0.
        batch_op.add_column(sa.Column("step", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("error", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f("ix_training_runs_tenant"), ["tenant"], unique=False)
        batch_op.create_foreign_key("fk_training_runs_job_id_jobs", "jobs", ["job_id"], ["id"], ondelete="SET NULL")
    op.create_table(
        "training_steps",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("metrics", JSON_DOC, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["training_runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "step"),
    )


def downgrade() -> None:
    op.drop_table("training_steps")
    with op.batch_alter_table("training_runs", schema=None) as batch_op:
        batch_op.drop_constraint("fk_training_runs_job_id_jobs", type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_training_runs_tenant"))
        for column in ("finished_at", "started_at", "error", "step", "launcher", "run_dir", "job_id", "tenant"):
            batch_op.drop_column(column)
    # Jobs of the new kind cannot be represented by the old type: they go (their runs stay).
    jobs = sa.table("jobs", sa.column("kind", sa.String))
    op.execute(jobs.delete().where(sa.cast(jobs.c.kind, sa.String).in_(NEW_KINDS)))
    if op.get_bind().dialect.name == "postgresql":
        # Postgres cannot drop a value from an enum type: the column moves to a new type of the old values.
        op.execute("ALTER TYPE job_kind RENAME TO job_kind_0005")
        sa.Enum(*OLD_KINDS, name="job_kind").create(op.get_bind())
        op.execute("ALTER TABLE jobs ALTER COLUMN kind TYPE job_kind USING kind::text::job_kind")
        op.execute("DROP TYPE job_kind_0005")
        return
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column(
            "kind",
            existing_type=sa.Enum(*OLD_KINDS, *NEW_KINDS, name="job_kind"),
            type_=sa.Enum(*OLD_KINDS, name="job_kind"),
            existing_nullable=False,
        )
