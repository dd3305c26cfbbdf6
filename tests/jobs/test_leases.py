"""Leases, in-process on the embedded default: which delivery runs a job, which attempt may store its outcome."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.exc import OperationalError

from cuda_agent.contracts.common import JobKind, JobStatus
from cuda_agent.contracts.jobs import ProbeRequest, ProbeResult
from cuda_agent.db import session_scope
from cuda_agent.db.models import Job
from cuda_agent.jobs import JOB_SPECS, JobContext, create_job, get_job, run_job
from cuda_agent.jobs.registry import PROBE_JOB
from cuda_agent.jobs.runner import MAX_ATTEMPTS, now_utc


@pytest.fixture
def fast_leases(monkeypatch: pytest.MonkeyPatch, embedded_db: None) -> None:
    from cuda_agent.settings import get_settings

    monkeypatch.setenv("CUDA_AGENT_JOB_LEASE_S", "1")
    monkeypatch.setenv("CUDA_AGENT_JOB_HEARTBEAT_S", "0.2")
    get_settings.cache_clear()


STORED: list[tuple[str, dict[str, Any]]] = []


def record_stored(_session: Any, job: Job, _request: ProbeRequest, result: ProbeResult) -> None:
    STORED.append((job.id, result.model_dump(mode="json")))


@pytest.fixture
def persisted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Every result the runner stores for a probe job (probes have no result table of their own)."""
    STORED.clear()
    monkeypatch.setitem(JOB_SPECS, JobKind.PROBE, replace(PROBE_JOB, store=f"{__name__}:record_stored"))
    return STORED


def held_by_another_attempt(*, lease_live: bool, attempts: int = 1, request: dict[str, Any] | None = None) -> str:
    """A probe job RUNNING under another attempt's lease, live or expired."""
    job, _ = create_job(JobKind.PROBE, request or {"echo": "x"})
    now = now_utc()
    with session_scope() as session:
        session.execute(
            update(Job)
            .where(Job.id == job.id)
            .values(
                status=JobStatus.RUNNING,
                attempts=attempts,
                started_at=now,
                lease_owner="elsewhere:1:dead",
                lease_expires_at=now + timedelta(seconds=60 if lease_live else -1),
            )
        )
    return job.id


def set_lease_owner(job_id: str, owner: str) -> None:
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(lease_owner=owner))


def run_in_thread(job_id: str) -> threading.Thread:
    thread = threading.Thread(target=run_job, args=(job_id,))
    thread.start()
    return thread


def wait_running(job_id: str) -> Job:
    deadline = time.monotonic() + 10
    while (job := get_job(job_id)).status is not JobStatus.RUNNING:
        assert time.monotonic() < deadline, job.status
        time.sleep(0.02)
    return job


def test_delivery_while_another_attempt_holds_a_live_lease_is_ignored(fast_leases, persisted) -> None:
    job_id = held_by_another_attempt(lease_live=True)
    run_job(job_id)
    job = get_job(job_id)
    assert (job.status, job.attempts, job.lease_owner, job.result) == (JobStatus.RUNNING, 1, "elsewhere:1:dead", None)
    assert persisted == []


def test_delivery_after_the_lease_expired_takes_over_and_stores_once(fast_leases, persisted) -> None:
    job_id = held_by_another_attempt(lease_live=False)
    run_job(job_id)
    job = get_job(job_id)
    assert job.status is JobStatus.SUCCEEDED and job.attempts == 2
    assert job.result is not None and job.result["attempt"] == 2
    assert job.lease_owner != "elsewhere:1:dead" and job.lease_expires_at is None
    assert persisted == [(job_id, job.result)]
    run_job(job_id)  # a late duplicate of the finished job
    assert persisted == [(job_id, job.result)] and get_job(job_id).attempts == 2


def test_a_job_whose_attempts_kept_dying_fails_as_poison(fast_leases) -> None:
    job_id = held_by_another_attempt(lease_live=False, attempts=MAX_ATTEMPTS)
    run_job(job_id)
    job = get_job(job_id)
    assert job.status is JobStatus.FAILED and job.attempts == MAX_ATTEMPTS
    assert job.error == f"the worker died {MAX_ATTEMPTS} times running this job"


def test_heartbeat_keeps_a_long_attempt_alive(fast_leases) -> None:
    job, _ = create_job(JobKind.PROBE, {"sleep_s": 2.5})
    thread = run_in_thread(job.id)
    wait_running(job.id)
    expiries = []
    for _ in range(4):  # 2 s with a 1 s lease: without renewals the lease would have run out
        time.sleep(0.5)
        running = get_job(job.id)
        assert running.lease_expires_at is not None
        expiry = running.lease_expires_at.replace(tzinfo=now_utc().tzinfo)
        assert expiry > now_utc(), "the lease ran out while its attempt was alive"
        expiries.append(expiry)
    thread.join(timeout=10)
    assert expiries == sorted(expiries) and expiries[0] < expiries[-1]
    assert get_job(job.id).status is JobStatus.SUCCEEDED


def test_an_attempt_that_lost_its_lease_stops_early_and_stores_nothing(fast_leases, persisted) -> None:
    job, _ = create_job(JobKind.PROBE, {"sleep_s": 30})
    thread = run_in_thread(job.id)
    wait_running(job.id)
    set_lease_owner(job.id, "thief:2:new")  # what a takeover by another attempt does to the row
    thread.join(timeout=5)  # the next heartbeat finds the lease gone, and the probe sees it as a cancellation
    assert not thread.is_alive(), "the superseded attempt kept running"
    after = get_job(job.id)
    assert (after.status, after.result, after.lease_owner) == (JobStatus.RUNNING, None, "thief:2:new")
    assert persisted == []


def lose_the_database(_request: ProbeRequest, _context: JobContext) -> ProbeResult:
    raise OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))


def test_a_database_fault_in_the_handler_gives_the_job_back_instead_of_failing_it(
    fast_leases, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(JOB_SPECS, JobKind.PROBE, replace(PROBE_JOB, handler=f"{__name__}:lose_the_database"))
    job, _ = create_job(JobKind.PROBE, {})
    run_job(job.id)
    after = get_job(job.id)
    # Still RUNNING, with a lease that is already over: the sweep sends it to another attempt.
    assert after.status is JobStatus.RUNNING and after.error is None
    assert after.lease_expires_at is not None and after.lease_expires_at.replace(tzinfo=now_utc().tzinfo) <= now_utc()


def test_no_renewal_runs_between_the_store_and_the_heartbeats_end(
    fast_leases, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A beat after the store found the job finished and logged a lost lease (it landed in a CLI's JSON output)."""
    from cuda_agent.jobs import runner
    from cuda_agent.settings import get_settings

    monkeypatch.setenv("CUDA_AGENT_JOB_HEARTBEAT_S", "0.01")
    get_settings.cache_clear()
    store = runner._complete

    def store_then_linger(*args: Any) -> bool:
        stored = store(*args)
        time.sleep(0.2)  # twenty beats' time between the store's commit and the heartbeat's end
        return stored

    monkeypatch.setattr(runner, "_complete", store_then_linger)
    job, _ = create_job(JobKind.PROBE, {})
    run_job(job.id)
    assert get_job(job.id).status is JobStatus.SUCCEEDED
    assert [r.getMessage() for r in caplog.records if "lease" in r.getMessage()] == []
