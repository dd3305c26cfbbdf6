"""All Celery settings live here, each with the reason it is set.

Tasks are thin wrappers over plain functions (cuda_agent.jobs.run_job); results are stored in the SQL
database by those functions, never in a Celery result backend.
"""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from cuda_agent.contracts.common import QueueName
from cuda_agent.jobs.registry import JOB_SPECS
from cuda_agent.settings import Settings, get_settings

# The task modules of the five services: a worker imports them all and consumes the queues it is told to.
SERVICE_TASK_MODULES = [
    "cuda_agent.queue.tasks",
    "services.compile_svc.tasks",
    "services.eval_svc.tasks",
    "services.agent_svc.tasks",
]

# Queues whose work holds a GPU: their workers run one task at a time (one worker per GPU).
GPU_QUEUES = frozenset({QueueName.EVAL, QueueName.PROFILE, QueueName.TRAIN})


def make_celery(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    app = Celery("cuda_agent", broker=settings.redis_url or "memory://", include=SERVICE_TASK_MODULES)
    app.conf.update(
        task_queues=[Queue(q.value) for q in QueueName],
        task_default_queue=QueueName.COMPILE.value,
        task_routes={spec.task_name: {"queue": spec.queue.value} for spec in JOB_SPECS.values()},
        # JSON only: a pickled message from a compromised producer would be code execution on a GPU host.
        task_serializer="json",
        accept_content=["json"],
        # Ack after the task ran, and requeue when the worker process dies, so a SIGKILLed worker or an
        # OOM-killed child does not lose the job; run_job's idempotency absorbs the redelivery.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # One message at a time per process: a GPU worker must not hoard eval jobs another GPU could run.
        worker_prefetch_multiplier=1,
        # Results go to Postgres through run_job; a Redis result backend would be a second, lossy store.
        task_ignore_result=True,
        task_time_limit=settings.task_time_limit_s,
        # The soft limit lets a handler clean up (kill its sandbox) before the hard kill.
        task_soft_time_limit=settings.task_time_limit_s - min(30, settings.task_time_limit_s // 10),
        # Must exceed the longest task, or Redis hands a still-running task to a second worker.
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
    return app


celery_app = make_celery()
