"""Contracts of training runs as a service manages them: what a tenant asks for (POST /v1/runs), what the
start_training job returns, and what a run looks like to its reader.

A tenant never names a path: the base model is a name under the operator's models folder and a warm start is
another run of the same tenant, both resolved on the server (cuda_agent.train.jobs). Hyperparameters are those of
``TrainConfig`` (the same bounds, checked here so a bad one is a 422, not a failed run).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from cuda_agent.contracts.common import MAX_NAME_CHARS, JobStatus, RequestModel
from cuda_agent.contracts.train import MAX_TRAJECTORY_IDS, TrainConfig, TrainStage

ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# A folder name under settings.models_dir: no separators, no leading dot (so no "..").
MODEL_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$"
# TrainConfig fields the server sets from the request's other fields and the tenant; never sent as hyperparameters.
SERVER_FIELDS = frozenset({"model", "model_name", "init_from", "trajectory_ids", "tenant"})
MAX_PROCESSES = 64  # torchrun processes of one run on one host


class RunRequest(RequestModel):
    """One stage of a training run: which model, which trajectories, which hyperparameters, how many processes."""

    model_config = ConfigDict(extra="forbid")

    stage: TrainStage = Field(description="rft (rejection-sampled fine-tuning), value (critic pretraining), or ppo.")
    model: str = Field(
        pattern=MODEL_NAME_PATTERN,
        description="Base model: a folder name under the operator's models directory (a transformers checkpoint).",
    )
    model_name: str | None = Field(
        None,
        max_length=MAX_NAME_CHARS,
        description="The name the policy served under when the trajectories were sampled; None: `model`.",
    )
    init_from_run: str | None = Field(
        None,
        pattern=ID_PATTERN,
        description="Start from the newest checkpoint of this earlier run of yours (e.g. value after rft).",
    )
    trajectory_ids: list[Annotated[str, StringConstraints(pattern=ID_PATTERN)]] = Field(
        default_factory=list,
        max_length=MAX_TRAJECTORY_IDS,
        description="Your stored trajectories for rft and value (ppo samples its own).",
    )
    hyperparameters: dict[str, Any] = Field(
        default_factory=dict, description="TrainConfig fields (steps, actor_lr, clip_low, ...), with its bounds."
    )
    processes: int = Field(1, ge=1, le=MAX_PROCESSES, description="torchrun processes (one per GPU); 1: plain.")

    @field_validator("hyperparameters")
    @classmethod
    def _hyperparameters(cls, values: dict[str, Any]) -> dict[str, Any]:
        if named := sorted(SERVER_FIELDS & values.keys()):
            raise ValueError(f"{', '.join(named)} cannot be a hyperparameter (set by the request's other fields)")
        try:  # placeholders for the server-set fields: only the hyperparameters are checked here
            TrainConfig.model_validate({**values, "model": "-", "model_name": "-"})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"hyperparameters.{where}: {first['msg']}") from None
        return values


class StartTrainingResult(BaseModel):
    """The start_training job's result: the run it launched and where its process runs."""

    run_id: str
    launcher: str


class CheckpointView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    step: int
    uri: str
    metrics: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime


class RunSummary(BaseModel):
    """A run as GET /v1/runs lists it."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    # The table's column (from the first schema) is `algorithm`; clients see the stage.
    stage: str = Field(validation_alias=AliasChoices("algorithm", "stage"))
    status: JobStatus
    step: int
    metrics: dict[str, Any] = Field(default_factory=dict, description="The latest step's metrics.")
    error: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class RunDetail(RunSummary):
    """A run with its configuration and checkpoints (GET /v1/runs/{id})."""

    config: dict[str, Any]
    job_id: str | None = None
    checkpoints: list[CheckpointView] = Field(default_factory=list)


class StepMetrics(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    step: int
    metrics: dict[str, Any]
