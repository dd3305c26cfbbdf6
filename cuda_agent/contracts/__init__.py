"""Pydantic contracts and status enums shared by every service.

One module per domain; services import from here and never define their own copies.
"""

from cuda_agent.contracts.common import (
    CompileStatus,
    Device,
    EvalStatus,
    JobKind,
    JobStatus,
    QueueName,
    TolerancePreset,
)

__all__ = ["CompileStatus", "Device", "EvalStatus", "JobKind", "JobStatus", "QueueName", "TolerancePreset"]
