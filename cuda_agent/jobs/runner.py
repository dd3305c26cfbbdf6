"""Submit, execute and read jobs. With cuda_agent.jobs.recovery, the only code that changes a job's status.

Delivery is at-least-once (acks late, redelivery after a worker dies, re-dispatch by the sweeper); execution is
made effectively once by the job row. The attempt that runs a job holds a lease on it (owner, expiry) that a
heartbeat thread renews while the handler runs:

- a delivery of a finished job does nothing;
- a delivery of a running job whose lease is live is a duplicate of a live attempt and does nothing (if that attempt
  dies later, its lease expires and cuda_agent.jobs.recovery sends the job again, so acking the duplicate loses
  nothing);
- a delivery of a running job whose lease expired takes the job over (a new attempt; MAX_ATTEMPTS caps poison jobs);
- an attempt stores its outcome only while it still holds the lease, so a superseded attempt never stores a result.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

from kombu.exceptions import OperationalError as BrokerUnreachable
from pydantic import BaseModel, ValidationError
from sqlalchemy import func, select, text, update
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from cuda_agent.contracts.common import JobKind, JobStatus, QueueName
from cuda_agent.db import session_scope
from cuda_agent.db.models import Job
from cuda_agent.jobs.registry import JOB_SPECS, JobContext, JobSpec, RequestT, ResultT
from cuda_agent.logging import get_logger
from cuda_agent.settings import get_settings

log = get_logger(__name__)
T = TypeVar("T")

ACTIVE = tuple(status for status in JobStatus if not status.terminal)
# A job whose worker died this many times is poison (it kills whoever runs it): fail it instead of looping.
MAX_ATTEMPTS = 3
# A lost database connection (Postgres restarted, backend terminated): the pool replaces it, and the runner's own
# short transactions are safe to repeat, so they are retried this long before the attempt gives up.
TRANSIENT_DB_ERRORS = (OperationalError, InterfaceError)
DB_RETRY_S = 30.0


class JobNotFound(LookupError):
    pass


class JobFailed(RuntimeError):
    """A job ended without a result (its handler raised, it was cancelled, its worker kept dying)."""


class TenantLimitExceeded(RuntimeError):
    """The tenant already has ``limit`` jobs of this kind queued or running."""

    def __init__(self, tenant: str | None, kind: JobKind, active: int, limit: int) -> None:
        super().__init__(
            f"tenant {tenant} already has {active} {kind.value} jobs queued or running (limit {limit}); "
            "wait for one to finish or cancel one"
        )
        self.tenant, self.kind, self.active, self.limit = tenant, kind, active, limit


def now_utc() -> datetime:
    # Leases compare times written by different hosts: their clocks must agree to well within job_lease_s (NTP).
    return datetime.now(UTC)


def _aware(moment: datetime) -> datetime:
    # SQLite hands back naive datetimes for timezone-aware columns; every time stored here is UTC.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def idempotency_digest(tenant: str | None, kind: JobKind, key: str) -> str:
    """What is stored for a client's idempotency key: fixed-length whatever the key's length, and scoped to the
    tenant and the job kind (JSON keeps the three parts from running into each other)."""
    return hashlib.sha256(json.dumps([tenant, kind.value, key]).encode()).hexdigest()


def create_job(
    kind: JobKind,
    request: BaseModel | dict[str, Any],
    *,
    idempotency_key: str | None = None,
    tenant: str | None = None,
    queue: QueueName | None = None,
    limit: int | None = None,
) -> tuple[Job, bool]:
    """Store a job without dispatching it: (job, created).

    With an idempotency key this tenant already used for this kind, the first job is returned and created is False.
    With ``limit``, TenantLimitExceeded when the tenant already has that many jobs of ``kind`` queued or running;
    the count and the insert are one atomic step, so concurrent submissions cannot overshoot the limit.

    ``request`` is the kind's request model (routes hand over the body FastAPI parsed), or its JSON form from code.
    The runner validates it once, when an attempt loads it: a document that does not fit fails its job.
    """
    spec = JOB_SPECS[kind]
    if isinstance(request, BaseModel) and not isinstance(request, spec.request_model):
        raise TypeError(f"a {kind.value} job takes a {spec.request_model.__name__}, not a {type(request).__name__}")
    document = request.model_dump(mode="json") if isinstance(request, BaseModel) else request
    digest = idempotency_digest(tenant, kind, idempotency_key) if idempotency_key is not None else None
    try:
        with session_scope() as session, _tenant_lock(session, tenant, kind, enabled=limit is not None):
            existing = _find_by_digest(session, digest)
            if existing is not None:
                return existing, False
            if limit is not None and (active := _count_active(session, tenant, kind)) >= limit:
                raise TenantLimitExceeded(tenant, kind, active, limit)
            job = Job(kind=kind, queue=queue or spec.queue, request=document, tenant=tenant, idempotency_digest=digest)
            session.add(job)
    except IntegrityError:  # the same key submitted concurrently: the other insert won
        with session_scope() as session:
            existing = _find_by_digest(session, digest)
        if existing is None:
            raise
        return existing, False
    return job, True


def _find_by_digest(session: Session, digest: str | None) -> Job | None:
    if digest is None:
        return None
    existing = session.scalars(select(Job).where(Job.idempotency_digest == digest)).one_or_none()
    if existing is not None:
        log.info("job already submitted", extra={"job_id": existing.id})
    return existing


# SQLite (the embedded default) serves one process; a process lock serializes its count-and-insert.
_EMBEDDED_LIMIT_LOCK = threading.Lock()


@contextmanager
def _tenant_lock(session: Session, tenant: str | None, kind: JobKind, *, enabled: bool) -> Iterator[None]:
    """Serialize count-and-insert per (tenant, kind) for the rest of the session's transaction."""
    if not enabled:
        yield
        return
    if session.get_bind().dialect.name == "postgresql":
        # A transaction-level advisory lock: released at commit or rollback, even if this process dies.
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": advisory_key("job-limit", tenant, kind)})
        yield
        return
    with _EMBEDDED_LIMIT_LOCK:
        yield
        session.commit()  # the insert is visible to the next count before the lock is let go


def advisory_key(*parts: object) -> int:
    """A Postgres advisory lock key (signed 64 bits) for a name made of ``parts``."""
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _count_active(session: Session, tenant: str | None, kind: JobKind) -> int:
    return (
        session.scalar(
            select(func.count()).select_from(Job).where(Job.tenant == tenant, Job.kind == kind, Job.status.in_(ACTIVE))
        )
        or 0
    )


def active_jobs(tenant: str, kind: JobKind) -> int:
    """How many jobs of ``kind`` the tenant has queued or running (what ``create_job(limit=...)`` counts)."""
    with session_scope() as session:
        return _count_active(session, tenant, kind)


def submit_job(
    kind: JobKind,
    request: BaseModel | dict[str, Any],
    *,
    idempotency_key: str | None = None,
    tenant: str | None = None,
    queue: QueueName | None = None,
    limit: int | None = None,
) -> Job:
    """Store a job and hand it to its queue; with no broker configured, run it here before returning.

    A second submission with the same idempotency key returns the first job instead of creating another;
    ``limit`` is create_job's per-tenant concurrency limit.
    """
    job, created = create_job(kind, request, idempotency_key=idempotency_key, tenant=tenant, queue=queue, limit=limit)
    if created:
        dispatch(job)
    return get_job(job.id)


def dispatch(job: Job) -> None:
    """Send the job to its Celery queue, or run it in-process on the embedded default.

    An unreachable broker does not fail the submission: the job is stored, and the sweeper sends it once the
    broker answers again.
    """
    if get_settings().embedded:
        run_job(job.id)
        return
    try:
        publish(job)
    except BrokerUnreachable as exc:
        log.warning(
            "broker unreachable; the job stays queued until the sweeper sends it",
            extra={"job_id": job.id, "error": str(exc)},
        )
        return
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job.id).values(dispatched_at=now_utc()))


def publish(job: Job) -> None:
    """Hand one message for ``job`` to the broker (no bookkeeping: see dispatch and the sweeper)."""
    from cuda_agent.queue import celery_app

    celery_app.send_task(JOB_SPECS[job.kind].task_name, args=[job.id], queue=job.queue.value)


@dataclass(frozen=True)
class _Claim:
    kind: JobKind
    request: dict[str, Any]
    attempt: int
    tenant: str | None


@dataclass(frozen=True)
class _Outcome:
    """A handler's typed result, with what the kind's store needs to write its result row."""

    spec: JobSpec[Any, Any]
    request: BaseModel
    result: BaseModel


def new_lease_owner() -> str:
    """An attempt's identity: the host and process that run it, and a token unique to this attempt."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:16]}"


def lease_is_live(job: Job, now: datetime) -> bool:
    return job.lease_expires_at is not None and _aware(job.lease_expires_at) > now


def poisoned(job: Job) -> bool:
    """True when the job's attempts ran out: it is failed instead of run again."""
    return job.attempts >= MAX_ATTEMPTS


def fail_poisoned(job: Job) -> None:
    finish(job, JobStatus.FAILED, error=f"the worker died {job.attempts} times running this job")


def run_job(job_id: str) -> None:
    """Execute one delivery of a job. Safe to call any number of times for the same job, concurrently too."""
    settings = get_settings()
    owner = new_lease_owner()
    claim = _with_db_retries("claim", lambda: _claim(job_id, owner, settings.job_lease_s))
    if claim is None:
        return
    log.info("job started", extra={"job_id": job_id, "kind": claim.kind.value, "attempt": claim.attempt})
    spec = JOB_SPECS[claim.kind]
    # The one validation of the request on its way to the handler (and the kind's store): what was stored is JSON,
    # either a model's dump or a document from code that nothing has checked yet.
    try:
        request = spec.request_model.model_validate(claim.request)
    except ValidationError as exc:
        invalid = f"invalid {spec.request_model.__name__}: {_validation_summary(exc)}"[:2000]
        _with_db_retries("store outcome", lambda: _complete(job_id, owner, None, invalid))
        log.info("job failed: invalid request", extra={"job_id": job_id, "error": invalid})
        return
    with _Heartbeat(job_id, owner, settings.job_heartbeat_s, settings.job_lease_s) as heartbeat:
        context = JobContext(
            job_id=job_id,
            attempt=claim.attempt,
            tenant=claim.tenant,
            report_progress=lambda progress: _set_progress(job_id, progress),
            # A superseded attempt stops as if cancelled: its outcome would be discarded anyway.
            is_cancelled=lambda: heartbeat.lost.is_set() or _cancel_requested(job_id),
        )
        outcome: _Outcome | None = None
        error: str | None = None
        try:
            outcome = _Outcome(spec, request, spec.run(request, context))
        except TRANSIENT_DB_ERRORS:
            # An infrastructure fault is not the job's failure: give the job up so another attempt runs it (the
            # sweeper re-dispatches an expired lease; MAX_ATTEMPTS bounds the retries).
            log.exception("job attempt lost the database; releasing it for another attempt", extra={"job_id": job_id})
            _with_db_retries("release", lambda: _expire_lease(job_id, owner))
            return
        except Exception as exc:  # a handler's failure is the job's failure, not a lost message
            log.exception("job failed", extra={"job_id": job_id})
            error = f"{type(exc).__name__}: {exc}".splitlines()[0][:2000]
        # The lease is held until the outcome is stored; the heartbeat ends with the store.
        with heartbeat.last_beat():
            stored = _with_db_retries("store outcome", lambda: _complete(job_id, owner, outcome, error))
    log.info("job finished" if stored else "outcome of a superseded attempt discarded", extra={"job_id": job_id})


def _validation_summary(exc: ValidationError) -> str:
    """The errors on one line: a job's error is shown as one line."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in exc.errors())


def _claim(job_id: str, owner: str, lease_s: float) -> _Claim | None:
    """Take the job for this attempt, or None when this delivery has nothing to run."""
    with session_scope() as session:
        job = session.get(Job, job_id, with_for_update=True)
        if job is None:
            raise JobNotFound(job_id)
        if job.status.terminal:
            log.info("delivery of a finished job ignored", extra={"job_id": job_id, "status": job.status.value})
            return None
        now = now_utc()
        if job.status is JobStatus.RUNNING:
            if job.lease_owner == owner:  # this claim committed but its reply was lost; the retry finds it
                return _Claim(job.kind, dict(job.request), job.attempts, job.tenant)
            if lease_is_live(job, now):
                log.info("duplicate delivery of a job with a live attempt ignored", extra={"job_id": job_id})
                return None
            log.warning(
                "taking over a job whose attempt stopped renewing its lease",
                extra={"job_id": job_id, "previous_owner": job.lease_owner},
            )
        if job.cancel_requested:
            finish(job, JobStatus.CANCELLED, error="cancelled before it started")
            return None
        if poisoned(job):
            fail_poisoned(job)
            return None
        job.status = JobStatus.RUNNING
        job.attempts += 1
        job.started_at = now
        job.lease_owner = owner
        job.lease_expires_at = now + timedelta(seconds=lease_s)
        return _Claim(job.kind, dict(job.request), job.attempts, job.tenant)


def _complete(job_id: str, owner: str, outcome: _Outcome | None, error: str | None) -> bool:
    """Store the attempt's outcome if it still holds the lease; False when another attempt superseded it."""
    with session_scope() as session:
        job = session.get(Job, job_id, with_for_update=True)
        if job is None or job.lease_owner != owner:
            return False
        if job.status.terminal:  # this commit went through but its reply was lost; the retry finds it
            return True
        if error is not None or outcome is None:
            finish(job, JobStatus.FAILED, error=error or "the handler returned no result")
            return True
        job.result = outcome.result.model_dump(mode="json")
        outcome.spec.store_result(session, job, outcome.request, outcome.result)
        # Kinds that stop early when asked (probe, optimize) say so in their result's `cancelled`; their partial
        # result is kept.
        stopped = job.cancel_requested and getattr(outcome.result, "cancelled", False)
        finish(job, JobStatus.CANCELLED if stopped else JobStatus.SUCCEEDED)
        return True


def _renew(job_id: str, owner: str, lease_s: float) -> bool:
    with session_scope() as session:
        renewed = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.lease_owner == owner, Job.status == JobStatus.RUNNING)
            .values(lease_expires_at=now_utc() + timedelta(seconds=lease_s))
        )
        return bool(renewed.rowcount)  # type: ignore[attr-defined]


def _expire_lease(job_id: str, owner: str) -> None:
    with session_scope() as session:
        session.execute(
            update(Job)
            .where(Job.id == job_id, Job.lease_owner == owner, Job.status == JobStatus.RUNNING)
            .values(lease_expires_at=now_utc())
        )


class _Heartbeat:
    """Renews the attempt's lease every ``interval_s`` in a background thread while the handler runs.

    ``lost`` is set when the lease was taken from this attempt (it expired and the job went to another attempt).
    A renewal that fails on a database error is tried again at the next beat; the lease outlives a few misses.
    Renewals and the attempt's final store take turns under one lock: a renewal right after the store found the job
    finished and would take that for a lost lease.
    """

    def __init__(self, job_id: str, owner: str, interval_s: float, lease_s: float) -> None:
        self.job_id, self.owner, self.interval_s, self.lease_s = job_id, owner, interval_s, lease_s
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{job_id}", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 5)

    @contextmanager
    def last_beat(self) -> Iterator[None]:
        """No renewal runs during the block, and none after it."""
        with self._lock:
            yield
            self._stop.set()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                with self._lock:
                    if self._stop.is_set():
                        return
                    renewed = _renew(self.job_id, self.owner, self.lease_s)
            except TRANSIENT_DB_ERRORS as exc:
                log.warning("lease renewal failed; retrying", extra={"job_id": self.job_id, "error": str(exc)})
                continue
            if not renewed:
                log.warning("lease lost: another attempt owns the job now", extra={"job_id": self.job_id})
                self.lost.set()
                return


def _with_db_retries(what: str, step: Callable[[], T]) -> T:
    """Run one of the runner's short transactions, again while the database connection keeps failing."""
    deadline = time.monotonic() + DB_RETRY_S
    delay = 0.1
    while True:
        try:
            return step()
        except TRANSIENT_DB_ERRORS as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning(f"database error during job {what}; retrying", extra={"error": str(exc).splitlines()[0]})
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def finish(job: Job, status: JobStatus, error: str | None = None) -> None:
    """Give the job its final status (the caller holds the row lock)."""
    job.status = status
    job.error = error
    job.finished_at = now_utc()
    job.lease_expires_at = None  # lease_owner stays: it names the attempt that finished the job


def _set_progress(job_id: str, progress: dict[str, Any]) -> None:
    try:
        with session_scope() as session:
            job = session.get(Job, job_id)
            if job is not None:
                job.progress = {**job.progress, **progress}
    except TRANSIENT_DB_ERRORS as exc:  # progress is advisory: a lost update must not fail the job
        log.warning("progress update lost", extra={"job_id": job_id, "error": str(exc).splitlines()[0]})


def _cancel_requested(job_id: str) -> bool:
    try:
        with session_scope() as session:
            job = session.get(Job, job_id)
            return job is None or job.cancel_requested
    except TRANSIENT_DB_ERRORS:  # unknown for now; asked again at the handler's next check
        return False


def get_job(job_id: str, tenant: str | None = None) -> Job:
    """The job, or JobNotFound (also when it belongs to another tenant: existence is not disclosed)."""
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None or (tenant is not None and job.tenant != tenant):
            raise JobNotFound(job_id)
        return job


def cancel_job(job_id: str, tenant: str | None = None) -> Job:
    """Ask a job to stop. A queued job is cancelled at once; a running one at its next check."""
    with session_scope() as session:
        job = session.get(Job, job_id, with_for_update=True)
        if job is None or (tenant is not None and job.tenant != tenant):
            raise JobNotFound(job_id)
        if not job.status.terminal:
            job.cancel_requested = True
            if job.status is JobStatus.QUEUED:
                finish(job, JobStatus.CANCELLED, error="cancelled before it started")
    return get_job(job_id)


def run_to_result(
    job: JobSpec[RequestT, ResultT], request: RequestT, timeout_s: float = 3600.0, tenant: str | None = None
) -> ResultT:
    """Submit a job of a kind (its registry entry, e.g. COMPILE_JOB) for ``tenant``, wait for it, and return its
    result; JobFailed names why there is none. The tenant matters beyond accounting: artifacts are scoped to the
    tenants whose compile jobs built them."""
    done = wait_for_job(submit_job(job.kind, request, tenant=tenant).id, timeout_s=timeout_s)
    if done.status is not JobStatus.SUCCEEDED or done.result is None:
        raise JobFailed(f"{job.kind.value} job {done.id} {done.status.value}: {done.error or 'no result'}")
    return job.result_model.model_validate(done.result)


def wait_for_job(job_id: str, timeout_s: float = 600.0, poll_s: float = 0.2) -> Job:
    """Poll until the job is finished; TimeoutError names the job and its last status."""
    deadline = time.monotonic() + timeout_s
    while True:
        job = get_job(job_id)
        if job.status.terminal:
            return job
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {job.status.value} after {timeout_s:.0f} s")
        time.sleep(poll_s)
