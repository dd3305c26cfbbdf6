"""The job view every service returns for queued work."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.contracts.common import MAX_NAME_CHARS, JobKind, JobStatus, QueueName, RequestModel


class JobView(BaseModel):
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
