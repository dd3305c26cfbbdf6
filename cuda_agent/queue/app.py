"""All Celery settings live here, each with the reason it is set.

Tasks are thin wrappers over plain functions (cuda_agent.jobs.run_job); results are stored in the SQL
database by those functions, never in a Celery result backend.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, bootsteps
from kombu import Queue
from kombu.exceptions import OperationalError as BrokerUnreachable
from redis.exceptions import ConnectionError as RedisUnreachable

from cuda_agent.contracts.common import QueueName
from cuda_agent.jobs.recovery import sweep_once
from cuda_agent.jobs.registry import JOB_SPECS
from cuda_agent.jobs.runner import TRANSIENT_DB_ERRORS
from cuda_agent.logging import get_logger
from cuda_agent.settings import Settings, get_settings

log = get_logger(__name__)

# One task per job kind, generated from the job registry; every worker declares them all and consumes the queues it
# is told to.
TASK_MODULES = ["cuda_agent.queue.tasks"]

# Queues whose work holds a GPU: their workers run one task at a time (one worker per GPU).
GPU_QUEUES = frozenset({QueueName.EVAL, QueueName.PROFILE, QueueName.TRAIN})


def make_celery(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    app = Celery("cuda_agent", broker=settings.redis_url or "memory://", include=TASK_MODULES)
    app.conf.update(
        task_queues=[Queue(q.value) for q in QueueName],
        task_default_queue=QueueName.COMPILE.value,
        task_routes={spec.task_name: {"queue": spec.queue.value} for spec in JOB_SPECS.values()},
        # JSON only: a pickled message from a compromised producer would be code execution on a GPU host.
        task_serializer="json",
        accept_content=["json"],
        # Ack after the task ran, and requeue when the worker process dies, so a SIGKILLed worker or an
        # OOM-killed child does not lose the job. A redelivery while the dead attempt's lease is still live is
        # ignored by run_job; the lease sweeper (JobSweeper below) then sends the job again once the lease expires.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # One message at a time per process: a GPU worker must not hoard eval jobs another GPU could run.
        worker_prefetch_multiplier=1,
        # Results go to Postgres through run_job; a Redis result backend would be a second, lossy store.
        task_ignore_result=True,
        task_time_limit=settings.task_time_limit_s,
        # The soft limit lets a handler clean up (kill its sandbox) before the hard kill.
        task_soft_time_limit=settings.task_time_limit_s - min(30, settings.task_time_limit_s // 10),
        # Short: it bounds how long a dead worker's unclaimed message waits. It need not exceed the longest task:
        # when Redis hands a still-running task's message to a second worker, run_job sees the live lease and
        # ignores it; a dead worker's running job is recovered through its expired lease, not this timeout.
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_s,
            # Sweep for messages of dead workers every 30 s (kombu's default scans only every ~100 s).
            "unacked_restore_interval": 30,
            "unacked_restore_throttle": 1,
        },
        broker_connection_retry_on_startup=True,
        worker_send_task_events=True,
        task_send_sent_event=True,
        # A worker child that ran CUDA code is replaced after each task: no CUDA context outlives a task.
        worker_max_tasks_per_child=1,
        enable_utc=True,
    )
    app.steps["worker"].add(JobSweeper)
    return app


class JobSweeper(bootsteps.StartStopStep):
    """Every worker runs the job sweep (cuda_agent.jobs.recovery) every ``job_sweep_interval_s``; an advisory lock
    lets one act at a time. It runs on the worker's event-loop timer in the main process, not in a thread: the
    prefork pool forks its children from that process, and a thread holding a lock at fork time would leave it
    locked in the child."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.timer_ref: Any = None

    def start(self, parent: Any) -> None:
        _sweep_sandbox_leftovers()
        self.timer_ref = parent.timer.call_repeatedly(get_settings().job_sweep_interval_s, _sweep, priority=10)

    def stop(self, parent: Any) -> None:
        if self.timer_ref is not None:
            self.timer_ref.cancel()
            self.timer_ref = None


def _sweep_sandbox_leftovers() -> None:
    """A worker killed mid-task leaves its sandboxes' cgroups and directories behind; whatever is older than the
    longest task belongs to no live run of any worker on this host."""
    from cuda_agent.compile import scratch_roots
    from cuda_agent.eval.children import CHILDREN_ROOT
    from cuda_agent.sandbox import sweep_stale

    try:
        sweep_stale([*scratch_roots(), CHILDREN_ROOT], older_than_s=get_settings().task_time_limit_s)
    except OSError:
        log.exception("sandbox leftover sweep failed")


def _sweep() -> None:
    # A failed pass is tried again at the next tick; the worker goes on either way.
    try:
        sweep_once()
    except (*TRANSIENT_DB_ERRORS, BrokerUnreachable, RedisUnreachable) as exc:
        log.warning(f"job sweep skipped, a service is unreachable: {str(exc).splitlines()[0]}")
    except Exception:
        log.exception("job sweep failed")


celery_app = make_celery()
