"""The job view every service returns for queued work."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.contracts.agent import BestCandidate, TerminationReason
from cuda_agent.contracts.common import MAX_NAME_CHARS, JobKind, JobStatus, QueueName, RequestModel
from cuda_agent.contracts.eval import EvalResult


class JobView(BaseModel):
    """A job as clients see it; ``result`` is the JSON form of the job kind's result model
    (cuda_agent.jobs.registry)."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: JobKind
    queue: QueueName
    status: JobStatus
    attempts: int
    progress: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] | None = None
    error: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class ProbeRequest(RequestModel):
    queue: QueueName = QueueName.COMPILE
    echo: str | None = Field(None, max_length=MAX_NAME_CHARS)
    sleep_s: float = Field(0.0, ge=0.0, le=600.0, description="Hold the worker this long (redelivery tests).")


class ProbeResult(BaseModel):
    """Where the probe ran: which worker took the message, and on which attempt."""

    echo: str | None
    host: str
    pid: int
    python: str
    attempt: int
    cancelled: bool = False  # stopped early: the job was cancelled, or its attempt superseded


class OptimizeResult(BaseModel):
    """The optimize job's result: the best candidate (not the last) with its verdict, and where the rest is."""

    trajectory_id: str
    termination: TerminationReason | None
    termination_detail: str
    turns: int
    best: BestCandidate | None
    model_new: str | None = Field(description="The best candidate's model_new.py, when there is one.")
    cancelled: bool  # the rollout stopped because the job was cancelled
    confirmation: EvalResult | None = Field(
        None,
        description="The best candidate judged once more after the rollout, by a fresh evaluation (new random "
        "seeds): the verdict of the kernel as returned, not of the search that picked it.",
    )
