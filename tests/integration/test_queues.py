"""Every queue carries a task end to end through real Redis and real Celery workers into real Postgres, and a
worker killed mid-task loses nothing."""

from __future__ import annotations

import time

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from cuda_agent.contracts.common import QueueName
from cuda_agent.db.models import Job
from tests.integration.conftest import start_api, wait_job

pytestmark = pytest.mark.integration


def stored_job(pg_url: str, job_id: str) -> Job:
    engine = create_engine(pg_url)
    with Session(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.expunge(job)
    engine.dispose()
    return job


def test_probe_through_every_queue_lands_in_postgres(stack_env, spawn, pg_url):
    spawn(["worker", *[q.value for q in QueueName], "--concurrency", "1"], stack_env, "worker")
    base = start_api(spawn, stack_env, "agent")

    job_ids = {}
    for queue in QueueName:
        response = httpx.post(f"{base}/v1/probe", json={"queue": queue.value, "echo": queue.value}, timeout=10)
        assert response.status_code == 202, response.text
        job_ids[queue] = response.json()["id"]

    for queue, job_id in job_ids.items():
        job = wait_job(base, job_id, {"succeeded", "failed"})
        assert job["status"] == "succeeded", job
        row = stored_job(pg_url, job_id)
        assert row.queue is queue
        assert row.result is not None and row.result["echo"] == queue.value
        assert row.attempts == 1


def test_every_api_is_healthy_ready_and_exports_metrics(stack_env, spawn):
    for service in ("compile", "eval", "agent", "dataset", "trainer"):
        base = start_api(spawn, stack_env, service)
        ready = httpx.get(f"{base}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["ready"] is True, ready.text
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        assert 'http_requests_total{method="GET",route="/readyz",service="%s",status="200"}' % service in metrics


def test_killed_worker_task_is_redelivered_once_and_not_duplicated(stack_env, spawn, pg_url):
    # Short limits so redelivery happens within the test: the visibility timeout must exceed the time limit.
    env = {**stack_env, "CUDA_AGENT_TASK_TIME_LIMIT_S": "6", "CUDA_AGENT_VISIBILITY_TIMEOUT_S": "8"}
    first = spawn(["worker", "dataset", "--concurrency", "1"], env, "worker-a")
    base = start_api(spawn, env, "dataset")

    body = {"queue": "dataset", "echo": "survivor", "sleep_s": 3}
    headers = {"Idempotency-Key": "redelivery-test"}
    job_id = httpx.post(f"{base}/v1/probe", json=body, headers=headers, timeout=10).json()["id"]
    wait_job(base, job_id, {"running"}, timeout=60)
    first.kill()  # SIGKILL to the whole group: the task's process dies mid-task, unacknowledged

    assert stored_job(pg_url, job_id).status.value == "running"
    time.sleep(9)  # past the visibility timeout: the new worker restores the unacked message at start
    spawn(["worker", "dataset", "--concurrency", "1"], env, "worker-b")
    job = wait_job(base, job_id, {"succeeded", "failed"}, timeout=90)
    assert job["status"] == "succeeded", job
    assert job["attempts"] == 2  # redelivered exactly once

    # The same submission again (a client retry) finds the same job rather than creating another.
    again = httpx.post(f"{base}/v1/probe", json=body, headers=headers, timeout=10).json()
    assert again["id"] == job_id

    # A stray duplicate delivery of the finished job changes nothing.
    from cuda_agent.jobs import run_job
    from cuda_agent.settings import get_settings

    before = stored_job(pg_url, job_id)
    get_settings.cache_clear()
    run_job(job_id)
    after = stored_job(pg_url, job_id)
    assert (after.attempts, after.result, after.finished_at) == (before.attempts, before.result, before.finished_at)
    engine = create_engine(pg_url)
    with Session(engine) as session:
        assert len(session.scalars(select(Job).where(Job.idempotency_key == "redelivery-test")).all()) == 1
    engine.dispose()
