"""The job sweep against real Postgres and a real (private) Redis: what it sends again, what it leaves alone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis
from sqlalchemy import text, update

from cuda_agent.contracts.common import JobKind, JobStatus, QueueName
from cuda_agent.db import get_engine, session_scope
from cuda_agent.db.models import Job
from cuda_agent.jobs import create_job, get_job
from cuda_agent.jobs.recovery import BROKER_MARKER, SweepReport, sweep_once
from cuda_agent.jobs.runner import MAX_ATTEMPTS, advisory_key, now_utc
from tests.integration.conftest import RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture
def queues(broker: RedisServer, monkeypatch: pytest.MonkeyPatch) -> redis.Redis:
    """The broker's Redis, after the first sweep set its marker (a fresh broker is one that lost its data)."""
    from cuda_agent.settings import get_settings

    monkeypatch.setenv("CUDA_AGENT_JOB_REQUEUE_AFTER_S", "60")
    get_settings.cache_clear()
    assert sweep_once().broker_lost_data
    return redis.Redis.from_url(broker.url)


def job_in(status: JobStatus, *, age_s: float = 0, queue: QueueName = QueueName.DATASET, **values: Any) -> str:
    """A probe job in ``status``, created ``age_s`` ago, with other columns as given."""
    job, _ = create_job(JobKind.PROBE, {}, queue=queue)
    with session_scope() as session:
        session.execute(
            update(Job)
            .where(Job.id == job.id)
            .values(status=status, created_at=now_utc() - timedelta(seconds=age_s), **values)
        )
    return job.id


def ago(seconds: float) -> Any:
    return now_utc() - timedelta(seconds=seconds)


def test_running_jobs_with_an_expired_lease_are_sent_again(queues: redis.Redis) -> None:
    dead = job_in(JobStatus.RUNNING, attempts=1, lease_owner="h:1:a", lease_expires_at=ago(1))
    legacy = job_in(JobStatus.RUNNING, attempts=1)  # RUNNING from before leases: nothing renews it
    alive = job_in(JobStatus.RUNNING, attempts=1, lease_owner="h:2:b", lease_expires_at=ago(-60))
    poison = job_in(JobStatus.RUNNING, attempts=MAX_ATTEMPTS, lease_owner="h:3:c", lease_expires_at=ago(1))
    cancelled = job_in(JobStatus.RUNNING, attempts=1, cancel_requested=True, lease_expires_at=ago(1))

    report = sweep_once()
    assert sorted(report.requeued) == sorted([dead, legacy])
    assert (report.failed, report.cancelled, report.resent) == ([poison], [cancelled], [])
    for job_id in (dead, legacy):
        job = get_job(job_id)
        assert (job.status, job.lease_owner, job.attempts) == (JobStatus.QUEUED, None, 1)
        assert job.dispatched_at is not None
    assert queues.llen("dataset") == 2
    assert get_job(alive).status is JobStatus.RUNNING and get_job(alive).lease_owner == "h:2:b"
    assert get_job(poison).status is JobStatus.FAILED
    assert get_job(cancelled).status is JobStatus.CANCELLED
    # Sent once: the next pass finds them queued with a fresh message waiting in their queue.
    assert not sweep_once().changed and queues.llen("dataset") == 2


def test_queued_jobs_are_sent_again_only_when_their_message_may_be_lost(queues: redis.Redis) -> None:
    never_sent = job_in(JobStatus.QUEUED, age_s=120)
    fresh = job_in(JobStatus.QUEUED, age_s=1)  # its submitter is sending it right now
    sent_long_ago = job_in(JobStatus.QUEUED, age_s=300, dispatched_at=ago(300))
    sent_recently = job_in(JobStatus.QUEUED, age_s=300, dispatched_at=ago(5))
    behind_others = job_in(JobStatus.QUEUED, age_s=300, dispatched_at=ago(300), queue=QueueName.EVAL)
    queues.lpush("eval", "a message the eval workers have not taken yet")

    report = sweep_once()
    assert sorted(report.resent) == sorted([never_sent, sent_long_ago])
    assert queues.llen("dataset") == 2 and queues.llen("eval") == 1
    for job_id in (fresh, sent_recently, behind_others):
        assert get_job(job_id).status is JobStatus.QUEUED and job_id not in report.resent


def test_after_the_broker_lost_its_data_every_queued_job_is_sent_again(queues: redis.Redis) -> None:
    # Sent 10 s ago (not yet due by age) and never sent: both messages are gone with the broker's data.
    jobs = [job_in(JobStatus.QUEUED, age_s=10, dispatched_at=ago(10)), job_in(JobStatus.QUEUED, age_s=300)]
    queues.delete(BROKER_MARKER)  # what a restart of a Redis that keeps nothing on disk does
    report = sweep_once()
    assert report.broker_lost_data and sorted(report.resent) == sorted(jobs)
    assert queues.llen("dataset") == 2 and queues.exists(BROKER_MARKER)
    assert not sweep_once().changed  # sent once; the marker is back


def test_a_failed_pass_leaves_the_broker_loss_for_the_next_one(
    queues: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = job_in(JobStatus.QUEUED, age_s=10, dispatched_at=ago(10))
    queues.delete(BROKER_MARKER)

    def broker_gone(_job: Job) -> None:
        raise ConnectionError("the broker went away mid-pass")

    with monkeypatch.context() as patch:
        patch.setattr("cuda_agent.jobs.recovery.publish", broker_gone)
        with pytest.raises(ConnectionError):
            sweep_once()
    assert not queues.exists(BROKER_MARKER) and get_job(job_id).dispatched_at is not None  # rolled back
    assert sweep_once().resent == [job_id] and queues.llen("dataset") == 1


def test_one_sweep_acts_at_a_time(queues: redis.Redis) -> None:
    dead = job_in(JobStatus.RUNNING, attempts=1, lease_owner="h:1:a", lease_expires_at=ago(1))
    with get_engine().connect() as other_worker:
        other_worker.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": advisory_key("job-sweeper")})
        assert sweep_once() == SweepReport(acted=False)
        assert get_job(dead).status is JobStatus.RUNNING
        other_worker.rollback()
    assert sweep_once().requeued == [dead]
