"""The synthesize_dataset and measure_problem jobs through the job runner (embedded: in-process, SQLite), the
eval-queue fan-out of a synthesis's checks, and the migration that adds their kinds."""

from __future__ import annotations

import pytest
from sqlalchemy import func, inspect, select

from cuda_agent.contracts.common import Device, JobKind, JobStatus
from cuda_agent.contracts.dataset import (
    ComposeRequestOptions,
    FilterRequestOptions,
    MeasureRequest,
    MeasureResult,
    SynthesizeRequest,
    SynthesizeResult,
)
from cuda_agent.dataset.filters import FilterOptions
from cuda_agent.dataset.jobs import measure_on_eval_queue
from cuda_agent.dataset.store import dataset_detail, dataset_problems
from cuda_agent.db import get_engine, session_scope
from cuda_agent.db.models import Job
from cuda_agent.jobs import JobContext, submit_job

GOOD = """
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.relu(self.linear(x))

def get_inputs():
    return [torch.randn(8, 64)]

def get_init_inputs():
    return [64]
"""
BROKEN = GOOD.replace("return torch.relu(self.linear(x))", "return torch.relu(self.linear(x[:, :3]))")

# aot_eager: the compile filter's tracing without inductor's C++ codegen (seconds per problem on this 2-core host).
CPU_FILTERS = FilterRequestOptions(compile_backend="aot_eager", timeout_s=120)


def test_synthesis_job_stores_a_dataset_and_a_rerun_reuses_it(embedded_db: None) -> None:
    request = SynthesizeRequest(n=5, seed=3, compose=ComposeRequestOptions(shapes="small"), filters=CPU_FILTERS)
    job = submit_job(JobKind.SYNTHESIZE_DATASET, request, tenant="tenant-a")
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert job.progress == {"kept": 5, "requested": 5}
    result = SynthesizeResult.model_validate(job.result)
    assert (result.kept, result.reused) == (5, False)
    assert result.stats["kept"] == 5 and sum(result.stats["op_counts"].values()) == 5
    assert result.name.startswith("synth-") and result.name.endswith("-n5-s3")

    detail = dataset_detail(result.dataset_id, "tenant-a")
    assert detail is not None and detail.problems == 5 and detail.seed == 3
    assert sum(sum(reasons.values()) for reasons in detail.removed_by_reason.values()) == sum(
        result.stats["removed"].values()
    )
    page = dataset_problems(result.dataset_id, "tenant-a", offset=0, limit=10)
    assert page is not None and page.total == 5
    assert all(p.filters and all(f["passed"] for f in p.filters) for p in page.items)

    # The same request again (no idempotency key: a new job) names the same dataset and does not synthesize again.
    again = submit_job(JobKind.SYNTHESIZE_DATASET, request, tenant="tenant-a")
    assert again.id != job.id and again.status is JobStatus.SUCCEEDED
    reused = SynthesizeResult.model_validate(again.result)
    assert (reused.dataset_id, reused.reused, reused.stats) == (result.dataset_id, True, result.stats)

    # Another request under a taken name fails its job with the reason, leaving the dataset as it was.
    renamed = request.model_copy(update={"n": 4, "name": result.name})
    clash = submit_job(JobKind.SYNTHESIZE_DATASET, renamed, tenant="tenant-a")
    assert clash.status is JobStatus.FAILED and clash.error is not None and "DatasetConflict" in clash.error


def test_measure_job_on_cpu_returns_the_verdict_and_eager_time(embedded_db: None) -> None:
    good = submit_job(JobKind.MEASURE_PROBLEM, MeasureRequest(problem_source=GOOD, filters=CPU_FILTERS))
    assert good.status is JobStatus.SUCCEEDED, good.error
    assert good.queue.value == "eval"
    verdict = MeasureResult.model_validate(good.result)
    assert verdict.passed and verdict.infra_error is None
    assert verdict.eager_ms is not None and verdict.eager_ms > 0
    assert [c.name for c in verdict.results][-2:] == ["time_window", "compile"]

    broken = MeasureResult.model_validate(
        submit_job(JobKind.MEASURE_PROBLEM, MeasureRequest(problem_source=BROKEN, filters=CPU_FILTERS)).result
    )
    assert not broken.passed and broken.eager_ms is None
    assert broken.results[-1].name == "eager" and "RuntimeError" in (broken.results[-1].reason or "")


def test_fan_out_measures_each_problem_as_a_job_once(embedded_db: None) -> None:
    """The batch check a cuda synthesis uses in a deployment, here with the jobs run in-process: one measure job
    per problem keyed by the synthesis job, verdicts back under the batch's keys, and a redelivered synthesis
    (same job id) reusing the measurements instead of queueing new ones."""
    context = JobContext(
        job_id="synthesis-1", attempt=1, tenant="tenant-a", report_progress=lambda _: None, is_cancelled=lambda: False
    )
    check = measure_on_eval_queue(CPU_FILTERS, context)
    options = FilterOptions(compile_backend="aot_eager")
    verdicts = check([("0", GOOD), ("1", BROKEN)], options)
    assert verdicts["0"].passed and verdicts["0"].eager_ms is not None
    assert not verdicts["1"].passed and verdicts["1"].failure is not None
    assert verdicts["1"].failure.name == "eager"

    def measure_jobs() -> int:
        with session_scope() as session:
            query = select(func.count()).select_from(Job).where(Job.kind == JobKind.MEASURE_PROBLEM)
            return session.scalar(query.where(Job.tenant == "tenant-a")) or 0

    assert measure_jobs() == 2
    assert check([("0", GOOD), ("1", BROKEN)], options) == verdicts
    assert measure_jobs() == 2


def test_migrations_round_trip_on_sqlite(embedded_db: None) -> None:
    """0004 widens the kind column for the new kinds, and its downgrade drops their jobs and narrows it again."""
    from alembic import command

    from cuda_agent.db.session import alembic_config

    def kind_length() -> int:
        column = next(c for c in inspect(get_engine()).get_columns("jobs") if c["name"] == "kind")
        return int(column["type"].length)

    assert kind_length() == len("synthesize_dataset")
    submit_job(JobKind.MEASURE_PROBLEM, {"problem_source": ""})  # an invalid request: a failed job, stored
    command.downgrade(alembic_config(), "0003")
    assert kind_length() == len("evaluate")
    with get_engine().connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM jobs").scalar() == 0
    command.upgrade(alembic_config(), "head")
    assert kind_length() == len("synthesize_dataset")


@pytest.mark.integration
def test_new_job_kinds_are_stored_on_postgres_and_downgrade_drops_them(pg_url: str) -> None:
    from alembic import command

    from cuda_agent.db.session import alembic_config

    job = submit_job(JobKind.MEASURE_PROBLEM, {"problem_source": ""})
    assert job.kind is JobKind.MEASURE_PROBLEM and job.status is JobStatus.FAILED
    command.downgrade(alembic_config(), "0003")
    with get_engine().connect() as connection:
        labels = connection.exec_driver_sql("SELECT unnest(enum_range(NULL::job_kind))::text").scalars().all()
        assert "measure_problem" not in labels and "optimize" in labels
        assert connection.exec_driver_sql("SELECT count(*) FROM jobs").scalar() == 0
    command.upgrade(alembic_config(), "head")
    assert submit_job(JobKind.SYNTHESIZE_DATASET, {"n": 0}).kind is JobKind.SYNTHESIZE_DATASET


@pytest.mark.gpu
def test_measure_job_on_cuda_times_with_cuda_events(embedded_db: None) -> None:
    filters = FilterRequestOptions(device=Device.CUDA, time_window_ms=(0.0001, 1000.0))
    job = submit_job(JobKind.MEASURE_PROBLEM, MeasureRequest(problem_source=GOOD, filters=filters))
    assert job.status is JobStatus.SUCCEEDED, job.error
    verdict = MeasureResult.model_validate(job.result)
    assert verdict.passed, verdict.results
    assert verdict.eager_ms is not None and 0 < verdict.eager_ms < 100
