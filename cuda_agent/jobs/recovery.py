"""Job recovery: the sweep every worker runs, so that no job is lost to a dead worker or to a broker that lost data.

One pass (``sweep_once``), under a Postgres advisory lock so that one worker acts at a time:

1. QUEUED jobs whose message may be lost are sent again: those never sent (the broker was down at submit), which
   after the broker lost its data is every queued job (the marker key the sweep keeps in Redis is gone: a restart
   of a Redis that keeps nothing on disk, a flush); and those sent more than ``job_requeue_after_s`` ago while their
   queue holds no waiting message (a message dropped some other way).
2. RUNNING jobs whose lease expired (their attempt died: an OOM-killed pool child, a SIGKILLed worker, a lost host)
   go back to QUEUED and are sent again; jobs out of attempts fail, jobs asked to cancel end cancelled.

A duplicate message is harmless (run_job ignores deliveries of finished jobs and of jobs with a live attempt), so
these rules err on the side of sending. Embedded mode (SQLite, jobs run in the submitting process) has no sweep.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import redis
from sqlalchemy import and_, or_, select, text, update
from sqlalchemy.orm import Session

from cuda_agent.contracts.common import JobStatus, QueueName
from cuda_agent.db import session_scope
from cuda_agent.db.models import Job
from cuda_agent.jobs.runner import advisory_key, fail_poisoned, finish, now_utc, poisoned, publish
from cuda_agent.logging import get_logger
from cuda_agent.settings import ConfigError, Settings, get_settings

log = get_logger(__name__)

# Set in the broker's Redis database by the first sweep; gone after a restart that lost the queues.
BROKER_MARKER = "cuda_agent:jobs:broker-marker"
# Jobs handled per pass and per rule, so one pass stays short; the next pass takes the rest.
BATCH = 500
# A submitter sends its job right after storing it: a never-sent job younger than this is most likely being sent.
SUBMIT_GRACE_S = 5.0


@dataclass
class SweepReport:
    """What one pass did; ``acted`` is False when another worker's pass held the lock."""

    acted: bool
    broker_lost_data: bool = False
    resent: list[str] = field(default_factory=list)  # queued jobs sent again
    requeued: list[str] = field(default_factory=list)  # running jobs with an expired lease, sent again
    failed: list[str] = field(default_factory=list)  # out of attempts
    cancelled: list[str] = field(default_factory=list)  # cancel requested, attempt dead

    @property
    def changed(self) -> bool:
        return bool(self.broker_lost_data or self.resent or self.requeued or self.failed or self.cancelled)


def sweep_once() -> SweepReport:
    """One recovery pass (see the module docstring). Workers run it every ``job_sweep_interval_s``; fault
    injection checks call it to recover at once instead of waiting for the next pass."""
    settings = get_settings()
    if settings.embedded:
        raise ConfigError("the job sweep needs a broker (REDIS_URL): embedded mode runs jobs in-process")
    now = now_utc()
    with session_scope() as session:
        if not _try_lock(session):
            return SweepReport(acted=False)
        report = SweepReport(acted=True, broker_lost_data=_broker_marker_missing(settings))
        if report.broker_lost_data:
            # Every queued job's message may be gone: count them all as never sent (sent below, BATCH a pass).
            session.execute(update(Job).where(Job.status == JobStatus.QUEUED).values(dispatched_at=None))
        to_send = _lost_queued(session, settings, now)
        report.resent = [job.id for job in to_send]
        for job in _expired_leases(session, now):
            if job.cancel_requested:
                finish(job, JobStatus.CANCELLED, error="cancelled; its worker died")
                report.cancelled.append(job.id)
            elif poisoned(job):
                fail_poisoned(job)
                report.failed.append(job.id)
            else:
                job.status = JobStatus.QUEUED
                job.lease_owner = job.lease_expires_at = None
                to_send.append(job)
                report.requeued.append(job.id)
        # Sent before the rows commit: a worker that gets a message first waits on the row lock, then sees QUEUED.
        for job in to_send:
            publish(job)
            job.dispatched_at = now
    if report.broker_lost_data:  # only now: had this pass failed, the next one must see the loss again
        _set_broker_marker(settings)
    if report.changed:
        # The counts are in the message too: a Celery worker's log format drops extras.
        log.warning(
            f"job sweep: broker marker {'missing (new or emptied broker)' if report.broker_lost_data else 'present'}; "
            f"sent again {len(report.resent)} queued and {len(report.requeued)} running jobs; "
            f"failed {len(report.failed)}, cancelled {len(report.cancelled)}",
            extra={
                "broker_lost_data": report.broker_lost_data,
                "resent": report.resent,
                "requeued": report.requeued,
                "failed": report.failed,
                "cancelled": report.cancelled,
            },
        )
    return report


def _try_lock(session: Session) -> bool:
    if session.get_bind().dialect.name != "postgresql":
        return True  # SQLite serves one host; a duplicate pass only sends harmless duplicate messages
    return bool(session.scalar(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": advisory_key("job-sweeper")}))


def _broker_client(settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(settings.redis_url or "", socket_timeout=5, socket_connect_timeout=5)


def _broker_marker_missing(settings: Settings) -> bool:
    """True when the broker's queues may have lost messages (or the broker is new: then there were none)."""
    with _broker_client(settings) as client:
        return not client.exists(BROKER_MARKER)


def _set_broker_marker(settings: Settings) -> None:
    with _broker_client(settings) as client:
        client.set(BROKER_MARKER, now_utc().isoformat())


def _lost_queued(session: Session, settings: Settings, now: datetime) -> list[Job]:
    cutoff = now - timedelta(seconds=settings.job_requeue_after_s)
    query = select(Job).where(
        Job.status == JobStatus.QUEUED,
        or_(
            and_(Job.dispatched_at.is_(None), Job.created_at < now - timedelta(seconds=SUBMIT_GRACE_S)),
            and_(Job.dispatched_at < cutoff, Job.queue.not_in(_queues_with_waiting_messages(session, cutoff))),
        ),
    )
    return list(session.scalars(query.order_by(Job.created_at).limit(BATCH).with_for_update(skip_locked=True)))


def _queues_with_waiting_messages(session: Session, cutoff: datetime) -> set[QueueName]:
    """Queues of long-waiting jobs that still hold messages: those jobs are behind others, not lost."""
    from cuda_agent.queue import celery_app

    queues = set(
        session.scalars(select(Job.queue).distinct().where(Job.status == JobStatus.QUEUED, Job.dispatched_at < cutoff))
    )
    if not queues:
        return set()
    with celery_app.connection_for_write() as connection:
        channel = connection.default_channel
        return {queue for queue in queues if channel.queue_declare(queue=queue.value, passive=False).message_count}


def _expired_leases(session: Session, now: datetime) -> list[Job]:
    # A RUNNING row without a lease predates leases (migration 0003): nothing renews it, so it is a dead attempt.
    query = select(Job).where(
        Job.status == JobStatus.RUNNING, or_(Job.lease_expires_at.is_(None), Job.lease_expires_at < now)
    )
    return list(session.scalars(query.order_by(Job.created_at).limit(BATCH).with_for_update(skip_locked=True)))
