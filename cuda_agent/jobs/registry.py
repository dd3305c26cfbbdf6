"""The queue map: one entry per job kind with its request and result models, its queue, its Celery task name, the
plain function that does the work and the one that stores its result row.

Handlers are named by import path and imported on first use: an API process that only submits and reads jobs
never imports the compile or eval stacks (nor torch), and the library modules that own the work (cuda_agent.compile,
cuda_agent.eval, ...) need not import this module to register themselves. The same function runs in a Celery
worker and in the embedded CLI. The Celery tasks are generated from this map (cuda_agent.queue.tasks).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from sqlalchemy.orm import Session

from cuda_agent.contracts.agent import RolloutRequest
from cuda_agent.contracts.common import JobKind, QueueName
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.contracts.dataset import MeasureRequest, MeasureResult, SynthesizeRequest, SynthesizeResult
from cuda_agent.contracts.eval import EvalRequest, EvalResult, ProfileRequest, ProfileResult
from cuda_agent.contracts.jobs import OptimizeResult, ProbeRequest, ProbeResult
from cuda_agent.contracts.train_runs import RunRequest, StartTrainingResult
from cuda_agent.db.models import Job

RequestT = TypeVar("RequestT", bound=BaseModel)
ResultT = TypeVar("ResultT", bound=BaseModel)


@dataclass
class JobContext:
    """What a running handler may use: its job id and a way to report progress and see cancellation."""

    job_id: str
    attempt: int
    tenant: str | None
    report_progress: Callable[[dict[str, Any]], None]
    is_cancelled: Callable[[], bool]


# A handler takes the job's validated request and a context, and returns its result.
Handler = Callable[[RequestT, JobContext], ResultT]
# A store writes the job's result row in the transaction that gives the job its final status, keyed by job id
# (unique), so a redelivered job cannot store a second result.
Store = Callable[[Session, Job, RequestT, ResultT], None]


@dataclass(frozen=True)
class JobSpec(Generic[RequestT, ResultT]):
    kind: JobKind
    queue: QueueName  # the default; a probe may name any queue
    task_name: str  # Celery's name for the task: queued messages carry it, so never rename one
    request_model: type[RequestT]
    result_model: type[ResultT]
    handler: str  # "module:function", a Handler[RequestT, ResultT]
    store: str | None = None  # "module:function", a Store[RequestT, ResultT]; None: the job's row is its only record

    def run(self, request: RequestT, context: JobContext) -> ResultT:
        handler: Handler[RequestT, ResultT] = _resolve(self.handler)
        result = handler(request, context)
        if not isinstance(result, self.result_model):  # a programming error: the job fails and says so
            raise TypeError(f"{self.handler} returned {type(result).__name__}, not {self.result_model.__name__}")
        return result

    def store_result(self, session: Session, job: Job, request: RequestT, result: ResultT) -> None:
        if self.store is not None:
            store: Store[RequestT, ResultT] = _resolve(self.store)
            store(session, job, request, result)


def _resolve(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


PROBE_JOB = JobSpec(
    kind=JobKind.PROBE,
    queue=QueueName.COMPILE,
    task_name="jobs.probe",
    request_model=ProbeRequest,
    result_model=ProbeResult,
    handler="cuda_agent.jobs.probe:run_probe",
)
COMPILE_JOB = JobSpec(
    kind=JobKind.COMPILE,
    queue=QueueName.COMPILE,
    task_name="compile.build",
    request_model=CompileRequest,
    result_model=CompileResult,
    handler="cuda_agent.compile.jobs:compile_job",
    store="cuda_agent.compile.jobs:store_compile_result",
)
EVALUATE_JOB = JobSpec(
    kind=JobKind.EVALUATE,
    queue=QueueName.EVAL,
    task_name="eval.evaluate",
    request_model=EvalRequest,
    result_model=EvalResult,
    handler="cuda_agent.eval.jobs:evaluate_job",
    store="cuda_agent.eval.jobs:store_eval_result",
)
PROFILE_JOB = JobSpec(
    kind=JobKind.PROFILE,
    queue=QueueName.PROFILE,
    task_name="eval.profile",
    request_model=ProfileRequest,
    result_model=ProfileResult,
    handler="cuda_agent.eval.jobs:profile_job",
)
# The rollout stores its trajectory and turns itself, as it ends: they are its result, the job's row points at them.
OPTIMIZE_JOB = JobSpec(
    kind=JobKind.OPTIMIZE,
    queue=QueueName.ROLLOUT,
    task_name="agent.optimize",
    request_model=RolloutRequest,
    result_model=OptimizeResult,
    handler="cuda_agent.agent.jobs:optimize_job",
)
# A synthesis stores its dataset itself, as it ends (idempotently by name): the result names it.
SYNTHESIZE_DATASET_JOB = JobSpec(
    kind=JobKind.SYNTHESIZE_DATASET,
    queue=QueueName.DATASET,
    task_name="dataset.synthesize",
    request_model=SynthesizeRequest,
    result_model=SynthesizeResult,
    handler="cuda_agent.dataset.jobs:synthesize_dataset_job",
)
# On the eval queue because its GPU measurements must not share a GPU with an evaluation's timings.
MEASURE_PROBLEM_JOB = JobSpec(
    kind=JobKind.MEASURE_PROBLEM,
    queue=QueueName.EVAL,
    task_name="dataset.measure_problem",
    request_model=MeasureRequest,
    result_model=MeasureResult,
    handler="cuda_agent.dataset.jobs:measure_problem_job",
)
# Launches a training run's process and ends: the run (hours) outlives the job and its queue's time limits.
START_TRAINING_JOB = JobSpec(
    kind=JobKind.START_TRAINING,
    queue=QueueName.TRAIN,
    task_name="train.start",
    request_model=RunRequest,
    result_model=StartTrainingResult,
    handler="cuda_agent.train.jobs:start_training_job",
)

JOB_SPECS: dict[JobKind, JobSpec[Any, Any]] = {
    spec.kind: spec
    for spec in (
        PROBE_JOB,
        COMPILE_JOB,
        EVALUATE_JOB,
        PROFILE_JOB,
        OPTIMIZE_JOB,
        SYNTHESIZE_DATASET_JOB,
        MEASURE_PROBLEM_JOB,
        START_TRAINING_JOB,
    )
}
