"""Enums every service agrees on. Values are stored in the database: never rename one."""

from __future__ import annotations

from enum import StrEnum


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


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


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
