"""Tables. Created and changed only through the Alembic tree in migrations/, never with create_all."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Enum, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from cuda_agent.contracts.common import CompileStatus, EvalStatus, JobKind, JobStatus, QueueName

# JSONB on Postgres (indexable, compact); plain JSON on the embedded SQLite default.
JsonDoc = JSON().with_variant(JSONB(), "postgresql")


def _uuid() -> str:
    return uuid.uuid4().hex


def _now() -> datetime:
    return datetime.now(UTC)


def _enum(enum_cls: type[StrEnum], name: str) -> Enum:
    # Store the values ("compile_error"), not the member names, so rows read the same as the JSON contracts.
    return Enum(enum_cls, name=name, values_callable=lambda e: [m.value for m in e], validate_strings=True)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JsonDoc, list[Any]: JsonDoc}


class TimestampMixin:
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Problem(TimestampMixin, Base):
    __tablename__ = "problems"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_uuid)
    source_hash: Mapped[str] = mapped_column(String(64), unique=True)
    source: Mapped[str] = mapped_column(Text)
    name: Mapped[str | None] = mapped_column(String(200))
    ops: Mapped[list[Any]] = mapped_column(default=list)
    data_source: Mapped[str] = mapped_column(String(64), default="user")
    tags: Mapped[list[Any]] = mapped_column(default=list)


class Candidate(TimestampMixin, Base):
    __tablename__ = "candidates"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_uuid)
    code_hash: Mapped[str] = mapped_column(String(64), unique=True)
    form: Mapped[str] = mapped_column(String(32))
    files: Mapped[dict[str, Any]] = mapped_column()
    problem_id: Mapped[str | None] = mapped_column(ForeignKey("problems.id", ondelete="SET NULL"))


class Job(TimestampMixin, Base):
    """One unit of queued work. The idempotency digest makes a resubmission find the same row; the lease tells a
    redelivery of a dead attempt (take over) from a duplicate of a live one (ignore)."""

    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("idempotency_digest", name="uq_jobs_idempotency_digest"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_uuid)
    # SHA-256 of (tenant, kind, client key): fixed length whatever the client sends, scoped so that neither another
    # tenant nor another job kind can collide with it. NULL when the client sent no key.
    idempotency_digest: Mapped[str | None] = mapped_column(String(64))
    kind: Mapped[JobKind] = mapped_column(_enum(JobKind, "job_kind"))
    queue: Mapped[QueueName] = mapped_column(_enum(QueueName, "queue_name"))
    status: Mapped[JobStatus] = mapped_column(_enum(JobStatus, "job_status"), default=JobStatus.QUEUED, index=True)
    tenant: Mapped[str | None] = mapped_column(String(64), index=True)
    request: Mapped[dict[str, Any]] = mapped_column()
    result: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    progress: Mapped[dict[str, Any]] = mapped_column(default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # When a message for this job was last handed to the broker (NULL: never, e.g. the broker was down at submit).
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The attempt that runs the job ("host:pid:token") and until when it is presumed alive without a heartbeat.
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class CompileResultRow(TimestampMixin, Base):
    __tablename__ = "compile_results"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_uuid)
    # One result per job: a redelivered task that finishes twice cannot store two.
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    candidate_id: Mapped[str | None] = mapped_column(ForeignKey("candidates.id", ondelete="SET NULL"))
    cache_key: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[CompileStatus] = mapped_column(_enum(CompileStatus, "compile_status"))
    artifact_key: Mapped[str | None] = mapped_column(String(64), index=True)
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    diagnostics: Mapped[list[Any]] = mapped_column(default=list)
    resources: Mapped[list[Any]] = mapped_column(default=list)
    log: Mapped[str] = mapped_column(Text, default="")


class EvalResultRow(TimestampMixin, Base):
    __tablename__ = "eval_results"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_uuid)
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    candidate_id: Mapped[str | None] = mapped_column(ForeignKey("candidates.id", ondelete="SET NULL"))
    problem_id: Mapped[str | None] = mapped_column(ForeignKey("problems.id", ondelete="SET NULL"))
    status: Mapped[EvalStatus] = mapped_column(_enum(EvalStatus, "eval_status"))
    correct: Mapped[bool] = mapped_column(Boolean)
    reward: Mapped[float | None] = mapped_column(Float)
    speedup_vs_eager: Mapped[float | None] = mapped_column(Float)
    speedup_vs_compile: Mapped[float | None] = mapped_column(Float)
    timing_samples: Mapped[dict[str, Any]] = mapped_column(default=dict)
    fingerprint: Mapped[dict[str, Any]] = mapped_column(default=dict)
    findings: Mapped[list[Any]] = mapped_column(default=list)
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Trajectory(TimestampMixin, Base):
    __tablename__ = "trajectories"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_uuid)
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), index=True)
    problem_id: Mapped[str | None] = mapped_column(ForeignKey("problems.id", ondelete="SET NULL"))
    tenant: Mapped[str | None] = mapped_column(String(64), index=True)
    policy: Mapped[str] = mapped_column(String(64))
    termination: Mapped[str | None] = mapped_column(String(64))
    best_reward: Mapped[float | None] = mapped_column(Float)
    best_speedup: Mapped[float | None] = mapped_column(Float)
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)
    turns: Mapped[list[Turn]] = relationship(back_populates="trajectory", order_by="Turn.index")


class Turn(Base):
    __tablename__ = "turns"
    __table_args__ = (UniqueConstraint("trajectory_id", "index", name="uq_turns_trajectory_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    trajectory_id: Mapped[str] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    messages: Mapped[list[Any]] = mapped_column(default=list)
    tool_calls: Mapped[list[Any]] = mapped_column(default=list)
    observations: Mapped[list[Any]] = mapped_column(default=list)
    token_ids: Mapped[list[Any] | None] = mapped_column(JsonDoc)
    logprobs: Mapped[list[Any] | None] = mapped_column(JsonDoc)
    response_mask: Mapped[list[Any] | None] = mapped_column(JsonDoc)
    reward_events: Mapped[list[Any]] = mapped_column(default=list)
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    trajectory: Mapped[Trajectory] = relationship(back_populates="turns")


class Dataset(TimestampMixin, Base):
    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_uuid)
    # A tenant's datasets are named "<tenant>/<name>" (dataset.store), so the name stays unique across owners.
    name: Mapped[str] = mapped_column(String(200), unique=True)
    # The tenant whose synthesis made it; NULL: the operator's (the CLI). Only its owner sees it through the API.
    tenant: Mapped[str | None] = mapped_column(String(64), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)


class DatasetItem(Base):
    __tablename__ = "dataset_items"

    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True)
    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id", ondelete="CASCADE"), primary_key=True)
    split: Mapped[str] = mapped_column(String(32), default="train")


class TrainingRun(TimestampMixin, Base):
    __tablename__ = "training_runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_uuid)
    algorithm: Mapped[str] = mapped_column(String(32))  # the stage: rft | value | ppo
    dataset_id: Mapped[str | None] = mapped_column(ForeignKey("datasets.id", ondelete="SET NULL"))
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[JobStatus] = mapped_column(_enum(JobStatus, "training_status"), default=JobStatus.QUEUED)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)  # the latest step's; every step's: TrainingStep
    tenant: Mapped[str | None] = mapped_column(String(64), index=True)
    # The start_training job that launched the run (the run outlives it: the job ends once the process started).
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    run_dir: Mapped[str | None] = mapped_column(Text)  # checkpoints, logs; shared storage in a deployment
    # Where the process runs ("local:HOST:PID", "k8s:JOB"): lets a reader tell a dead local run from a live one.
    launcher: Mapped[str | None] = mapped_column(String(200))
    step: Mapped[int] = mapped_column(Integer, default=0)  # the last step recorded
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class TrainingStep(Base):
    """One optimizer step's metrics. Keyed by step: a run resumed from a checkpoint records its steps again."""

    __tablename__ = "training_steps"

    run_id: Mapped[str] = mapped_column(ForeignKey("training_runs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Checkpoint(TimestampMixin, Base):
    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("run_id", "step", name="uq_checkpoints_run_step"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_uuid)
    run_id: Mapped[str] = mapped_column(ForeignKey("training_runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    uri: Mapped[str] = mapped_column(Text)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)


class ApiKey(TimestampMixin, Base):
    """A tenant's API key. Only its SHA-256 is stored: a leaked table does not leak usable keys."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_uuid)
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str | None] = mapped_column(String(200))
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
