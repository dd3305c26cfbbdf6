"""The job runner on the embedded default (SQLite, in-process) and the migration tree."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from cuda_agent.contracts.common import JobKind, JobStatus, QueueName
from cuda_agent.db import get_engine
from cuda_agent.jobs import cancel_job, get_job, run_job, submit_job
from cuda_agent.jobs.registry import JOB_SPECS


def test_embedded_submit_runs_in_process(embedded_db: None) -> None:
    job = submit_job(JobKind.PROBE, {"echo": "hi"}, queue=QueueName.TRAIN)
    assert job.status is JobStatus.SUCCEEDED
    assert job.queue is QueueName.TRAIN
    assert job.result is not None and job.result["echo"] == "hi"
    assert job.attempts == 1


def test_idempotency_key_returns_the_first_job(embedded_db: None) -> None:
    first = submit_job(JobKind.PROBE, {"echo": "1"}, idempotency_key="k-1")
    second = submit_job(JobKind.PROBE, {"echo": "2"}, idempotency_key="k-1")
    assert second.id == first.id
    assert second.result == first.result


def test_redelivery_of_a_finished_job_changes_nothing(embedded_db: None) -> None:
    job = submit_job(JobKind.PROBE, {"echo": "x"})
    run_job(job.id)
    again = get_job(job.id)
    assert (again.attempts, again.finished_at, again.result) == (job.attempts, job.finished_at, job.result)


def test_handler_failure_is_a_failed_job_with_a_reason(embedded_db: None) -> None:
    job = submit_job(JobKind.PROBE, {"sleep_s": "not a number"})
    assert job.status is JobStatus.FAILED
    assert job.error is not None and job.error.startswith("invalid ProbeRequest: sleep_s")


def test_cancel_finished_job_keeps_its_status(embedded_db: None) -> None:
    job = submit_job(JobKind.PROBE, {})
    assert cancel_job(job.id).status is JobStatus.SUCCEEDED


def test_every_job_kind_has_a_distinct_task() -> None:
    names = [spec.task_name for spec in JOB_SPECS.values()]
    assert len(names) == len(set(names))


@pytest.mark.integration
def test_migrations_round_trip_on_postgres(pg_url: str) -> None:
    expected = {
        "problems",
        "candidates",
        "compile_results",
        "eval_results",
        "jobs",
        "trajectories",
        "turns",
        "datasets",
        "dataset_items",
        "training_runs",
        "checkpoints",
    }
    assert expected <= set(inspect(get_engine()).get_table_names())
    from alembic import command

    from cuda_agent.db.session import alembic_config

    command.downgrade(alembic_config(), "base")
    assert set(inspect(get_engine()).get_table_names()) <= {"alembic_version"}
    command.upgrade(alembic_config(), "head")
    assert expected <= set(inspect(get_engine()).get_table_names())
