"""Enums every service agrees on (values are stored in the database: never rename one), and the base of every
request contract a tenant sends."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, model_validator
from pydantic_core import PydanticCustomError

# Bounds of what a tenant may send. A body is also capped as a whole (settings.max_request_bytes, 413).
MAX_SOURCE_CHARS = 1_000_000  # a problem file or one candidate file
MAX_CANDIDATE_FILES = 64
MAX_PATH_CHARS = 255
MAX_NAME_CHARS = 200  # ids, names, short labels


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        # Postgres text and jsonb cannot hold NUL; SQLite stores it but every reader then trips over it.
        return "contains a NUL character (\\x00), which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not valid Unicode), which cannot be stored"
    return None


def _unstorable(value: Any, where: str) -> tuple[str, str] | None:
    """The first (place, problem) in raw input that no database or JSON encoder takes back: text with NUL or a
    lone surrogate (dict keys too), a non-finite number (NaN, Infinity, 1e400)."""
    if isinstance(value, str):
        problem = _text_problem(value)
        return (where or "body", problem) if problem else None
    if isinstance(value, BaseModel):  # a part built in code (an agent's candidate) is checked like a parsed one
        return _unstorable(dict(value), where)
    if isinstance(value, float):
        return None if math.isfinite(value) else (where or "body", "is not a finite number")
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and (problem := _text_problem(key)):
                return (where or "body", f"has a key that {problem}")
            if found := _unstorable(item, inner):
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if found := _unstorable(item, f"{where}[{i}]"):
                return found
    return None


class RequestModel(BaseModel):
    """The base of every contract a tenant sends: text and numbers anywhere in it (free-form dicts included) must
    survive storage and JSON, so a request is refused here (422) rather than failing later (500)."""

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        if found := _unstorable(data, ""):
            where, problem = found
            raise PydanticCustomError("unstorable_value", "{where} {problem}", {"where": where, "problem": problem})
        return data


class QueueName(StrEnum):
    """Celery queues, named by kind of work so each can be scaled on its own."""

    COMPILE = "compile"  # CPU: nvcc/g++ builds in the sandbox
    EVAL = "eval"  # GPU: one task per GPU at a time
    PROFILE = "profile"  # GPU: Nsight Compute, serialized per GPU
    ROLLOUT = "rollout"  # agent rollouts (drive compile/eval through their queues)
    DATASET = "dataset"  # problem synthesis and filtering
    TRAIN = "train"  # policy training runs


class JobKind(StrEnum):
    """What a job does; each kind has one Celery task and one queue (cuda_agent.jobs.registry)."""

    PROBE = "probe"  # end-to-end health check of a queue: a worker answers and the result lands in the DB
    COMPILE = "compile"
    EVALUATE = "evaluate"
    PROFILE = "profile"
    OPTIMIZE = "optimize"  # an agent rollout behind POST /v1/optimize
    SYNTHESIZE_DATASET = "synthesize_dataset"  # a dataset synthesis behind POST /v1/datasets
    MEASURE_PROBLEM = "measure_problem"  # a problem measured alone (no candidate): a synthesis's GPU filters
    START_TRAINING = "start_training"  # launches a training run's process behind POST /v1/runs; the run outlives it


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True once the job has ended: its status, result and error no longer change."""
        return self not in (JobStatus.QUEUED, JobStatus.RUNNING)


class CompileStatus(StrEnum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"  # the submitted code is at fault
    TIMEOUT = "timeout"
    SANDBOX_ERROR = "sandbox_error"  # infrastructure fault: never a reward of -1


class EvalStatus(StrEnum):
    CORRECT = "correct"
    INCORRECT = "incorrect"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    ILLEGAL_ACCESS = "illegal_access"
    HACK_DETECTED = "hack_detected"
    SANDBOX_ERROR = "sandbox_error"  # infrastructure fault: never a reward of -1


class Device(StrEnum):
    CUDA = "cuda"
    CPU = "cpu"


class TolerancePreset(StrEnum):
    KERNELBENCH = "kernelbench"
    PAPER = "paper"
    STRICT = "strict"
