"""The queue map: each job kind, its Celery task name, its queue, and the plain function that does the work.

Handlers are registered by the library module that owns the work (cuda_agent.compile, cuda_agent.eval, ...),
so the same function runs in a Celery worker and in the embedded CLI.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cuda_agent.contracts.common import JobKind, QueueName

# A handler takes the job's request document and a context, and returns the result document.
Handler = Callable[[dict[str, Any], "JobContext"], dict[str, Any]]


@dataclass(frozen=True)
class JobSpec:
    kind: JobKind
    queue: QueueName
    task_name: str
    handler_module: str  # imported on first use; registers the handler for this kind

    def handler(self) -> Handler:
        if self.kind not in _HANDLERS:
            importlib.import_module(self.handler_module)
        try:
            return _HANDLERS[self.kind]
        except KeyError:
            raise RuntimeError(f"{self.handler_module} did not register a handler for job kind {self.kind}") from None


JOB_SPECS: dict[JobKind, JobSpec] = {
    spec.kind: spec
    for spec in (
        JobSpec(JobKind.PROBE, QueueName.COMPILE, "jobs.probe", "cuda_agent.jobs.probe"),
        JobSpec(JobKind.COMPILE, QueueName.COMPILE, "compile.build", "cuda_agent.compile.jobs"),
        JobSpec(JobKind.EVALUATE, QueueName.EVAL, "eval.evaluate", "cuda_agent.eval.jobs"),
        JobSpec(JobKind.PROFILE, QueueName.PROFILE, "eval.profile", "cuda_agent.eval.jobs"),
        JobSpec(JobKind.OPTIMIZE, QueueName.ROLLOUT, "agent.optimize", "cuda_agent.agent.jobs"),
    )
}

_HANDLERS: dict[JobKind, Handler] = {}


def register_handler(kind: JobKind) -> Callable[[Handler], Handler]:
    """Decorator for the plain function that executes jobs of ``kind``; duplicates are a programming error."""

    def decorate(fn: Handler) -> Handler:
        if kind in _HANDLERS and _HANDLERS[kind] is not fn:
            raise RuntimeError(f"a handler for job kind {kind} is already registered")
        _HANDLERS[kind] = fn
        return fn

    return decorate


@dataclass
class JobContext:
    """What a running handler may use: its job id and a way to report progress and see cancellation."""

    job_id: str
    attempt: int
    tenant: str | None
    report_progress: Callable[[dict[str, Any]], None]
    is_cancelled: Callable[[], bool]


# Result rows written in the same transaction as the job's final status, keyed by job id (unique), so a
# redelivered job cannot store a second result.
Persister = Callable[[Any, Any, dict[str, Any]], None]
_PERSISTERS: dict[JobKind, Persister] = {}


def register_persister(kind: JobKind) -> Callable[[Persister], Persister]:
    def decorate(fn: Persister) -> Persister:
        _PERSISTERS[kind] = fn
        return fn

    return decorate


def persist_result(session: Any, job: Any, result: dict[str, Any]) -> None:
    persister = _PERSISTERS.get(job.kind)
    if persister is not None:
        persister(session, job, result)
