"""Submit, execute and read jobs. The only code that changes a job's status.

Delivery is at-least-once (acks late, redelivery after a worker dies); execution is made effectively once by
the job row: a delivery for a finished job does nothing, and result rows carry a unique job id.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from cuda_agent.contracts.common import JobKind, JobStatus, QueueName
from cuda_agent.db import session_scope
from cuda_agent.db.models import Job
from cuda_agent.jobs.registry import JOB_SPECS, JobContext, persist_result
from cuda_agent.logging import get_logger
from cuda_agent.settings import get_settings

log = get_logger(__name__)

FINISHED = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
# A job whose worker died this many times is poison (it kills whoever runs it): fail it instead of looping.
MAX_ATTEMPTS = 3


class JobNotFound(LookupError):
    pass


class JobFailed(RuntimeError):
    """A job ended without a result (its handler raised, it was cancelled, its worker kept dying)."""


def _now() -> datetime:
    return datetime.now(UTC)


def create_job(
    kind: JobKind,
    request: BaseModel | dict[str, Any],
    *,
    idempotency_key: str | None = None,
    tenant: str | None = None,
    queue: QueueName | None = None,
) -> tuple[Job, bool]:
    """Store a job without dispatching it: (job, created). With an idempotency key already used by this tenant,
    the first job is returned and created is False."""
    spec = JOB_SPECS[kind]
    document = request.model_dump(mode="json") if isinstance(request, BaseModel) else request
    job = Job(kind=kind, queue=queue or spec.queue, request=document, tenant=tenant)
    # Scoped by tenant: another tenant's key must neither collide with nor reveal this one's job.
    job.idempotency_key = f"{tenant or '-'}:{idempotency_key}" if idempotency_key else f"{kind.value}:{_new_id()}"
    try:
        with session_scope() as session:
            session.add(job)
    except IntegrityError:
        with session_scope() as session:
            existing = session.scalars(select(Job).where(Job.idempotency_key == job.idempotency_key)).one()
        log.info("job already submitted", extra={"job_id": existing.id, "idempotency_key": job.idempotency_key})
        return existing, False
    return job, True


def submit_job(
    kind: JobKind,
    request: BaseModel | dict[str, Any],
    *,
    idempotency_key: str | None = None,
    tenant: str | None = None,
    queue: QueueName | None = None,
) -> Job:
    """Store a job and hand it to its queue; with no broker configured, run it here before returning.

    A second submission with the same idempotency key returns the first job instead of creating another.
    """
    job, created = create_job(kind, request, idempotency_key=idempotency_key, tenant=tenant, queue=queue)
    if created:
        dispatch(job)
    return get_job(job.id)


def _new_id() -> str:
    return uuid.uuid4().hex


def dispatch(job: Job) -> None:
    """Send the job to its Celery queue, or run it in-process on the embedded default."""
    if get_settings().embedded:
        run_job(job.id)
        return
    from cuda_agent.queue import celery_app

    celery_app.send_task(JOB_SPECS[job.kind].task_name, args=[job.id], queue=job.queue.value)


def run_job(job_id: str) -> None:
    """Execute one delivery of a job. Safe to call any number of times for the same job."""
    settings = get_settings()
    with session_scope() as session:
        job = session.get(Job, job_id, with_for_update=True)
        if job is None:
            raise JobNotFound(job_id)
        if job.status in FINISHED:
            log.info("delivery of a finished job ignored", extra={"job_id": job_id, "status": job.status.value})
            return
        if job.status is JobStatus.RUNNING and job.started_at is not None:
            started = job.started_at if job.started_at.tzinfo else job.started_at.replace(tzinfo=UTC)
            # Within the task time limit the first delivery may still be running (a duplicate message from
            # requeue_stale_jobs). A dead worker's message comes back only after the visibility timeout, which
            # settings force to exceed the time limit, so a genuine redelivery always gets past this check.
            if _now() - started < timedelta(seconds=settings.task_time_limit_s):
                log.info("duplicate delivery of a running job ignored", extra={"job_id": job_id})
                return
        if job.cancel_requested:
            _finish(job, JobStatus.CANCELLED, error="cancelled before it started")
            return
        if job.attempts >= MAX_ATTEMPTS:
            _finish(job, JobStatus.FAILED, error=f"the worker died {job.attempts} times running this job")
            return
        job.status = JobStatus.RUNNING
        job.attempts += 1
        job.started_at = _now()
        kind, request, attempt, tenant = job.kind, dict(job.request), job.attempts, job.tenant

    context = JobContext(
        job_id=job_id,
        attempt=attempt,
        tenant=tenant,
        report_progress=lambda progress: _set_progress(job_id, progress),
        is_cancelled=lambda: _cancel_requested(job_id),
    )
    log.info("job started", extra={"job_id": job_id, "kind": kind.value, "attempt": attempt})
    try:
        result = JOB_SPECS[kind].handler()(request, context)
    except Exception as exc:  # a handler's failure is the job's failure, not a lost message
        log.exception("job failed", extra={"job_id": job_id})
        with session_scope() as session:
            failed = session.get(Job, job_id, with_for_update=True)
            if failed is not None and failed.status not in FINISHED:
                _finish(failed, JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}".splitlines()[0][:2000])
        return

    with session_scope() as session:
        done = session.get(Job, job_id, with_for_update=True)
        if done is None or done.status in FINISHED:
            return  # another delivery finished first; its result stands
        status = JobStatus.CANCELLED if done.cancel_requested and result.get("cancelled") else JobStatus.SUCCEEDED
        done.result = result
        persist_result(session, done, result)
        _finish(done, status)
    log.info("job finished", extra={"job_id": job_id, "status": status.value})


def _finish(job: Job, status: JobStatus, error: str | None = None) -> None:
    job.status = status
    job.error = error
    job.finished_at = _now()


def _set_progress(job_id: str, progress: dict[str, Any]) -> None:
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is not None:
            job.progress = {**job.progress, **progress}


def _cancel_requested(job_id: str) -> bool:
    with session_scope() as session:
        job = session.get(Job, job_id)
        return job is None or job.cancel_requested


def get_job(job_id: str, tenant: str | None = None) -> Job:
    """The job, or JobNotFound (also when it belongs to another tenant: existence is not disclosed)."""
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None or (tenant is not None and job.tenant != tenant):
            raise JobNotFound(job_id)
        return job


def cancel_job(job_id: str, tenant: str | None = None) -> Job:
    """Ask a job to stop. A queued job is cancelled at delivery; a running one at its next check."""
    with session_scope() as session:
        job = session.get(Job, job_id, with_for_update=True)
        if job is None or (tenant is not None and job.tenant != tenant):
            raise JobNotFound(job_id)
        if job.status not in FINISHED:
            job.cancel_requested = True
            if job.status is JobStatus.QUEUED:
                _finish(job, JobStatus.CANCELLED, error="cancelled before it started")
    return get_job(job_id)


def run_to_result(kind: JobKind, request: BaseModel, timeout_s: float = 3600.0) -> dict[str, Any]:
    """Submit a job, wait for it, and return its result document; JobFailed names why there is none."""
    job = wait_for_job(submit_job(kind, request).id, timeout_s=timeout_s)
    if job.status is not JobStatus.SUCCEEDED or job.result is None:
        raise JobFailed(f"{kind.value} job {job.id} {job.status.value}: {job.error or 'no result'}")
    return job.result


def wait_for_job(job_id: str, timeout_s: float = 600.0, poll_s: float = 0.2) -> Job:
    """Poll until the job is finished; TimeoutError names the job and its last status."""
    deadline = time.monotonic() + timeout_s
    while True:
        job = get_job(job_id)
        if job.status in FINISHED:
            return job
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {job.status.value} after {timeout_s:.0f} s")
        time.sleep(poll_s)


def requeue_stale_jobs(older_than_s: float = 300.0) -> int:
    """Send again the queued jobs whose message may have been lost (a broker restarted without its data).

    Duplicates are harmless: a delivery of a running or finished job does nothing.
    """
    cutoff = _now() - timedelta(seconds=older_than_s)
    with session_scope() as session:
        stale = list(session.scalars(select(Job).where(Job.status == JobStatus.QUEUED, Job.created_at < cutoff)))
    for job in stale:
        dispatch(job)
    return len(stale)


def active_jobs(tenant: str, kind: JobKind) -> int:
    """How many jobs of ``kind`` the tenant has queued or running (the per-tenant concurrency limit)."""
    with session_scope() as session:
        return (
            session.scalar(
                select(func.count())
                .select_from(Job)
                .where(Job.tenant == tenant, Job.kind == kind, Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]))
            )
            or 0
        )
