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


def test_probe_through_every_queue_lands_in_postgres(stack_env, spawn, pg_url, auth):
    spawn(["worker", *[q.value for q in QueueName], "--concurrency", "1"], stack_env, "worker")
    base = start_api(spawn, stack_env, "agent")

    job_ids = {}
    for queue in QueueName:
        response = httpx.post(
            f"{base}/v1/probe", json={"queue": queue.value, "echo": queue.value}, headers=auth, timeout=10
        )
        assert response.status_code == 202, response.text
        job_ids[queue] = response.json()["id"]

    for queue, job_id in job_ids.items():
        job = wait_job(base, job_id, {"succeeded", "failed"}, auth)
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
        assert f'http_requests_total{{method="GET",route="/readyz",service="{service}",status="200"}}' in metrics


def test_killed_worker_task_is_redelivered_once_and_not_duplicated(stack_env, spawn, pg_url, auth):
    # Short limits so redelivery happens within the test: the visibility timeout must exceed the time limit.
    env = {**stack_env, "CUDA_AGENT_TASK_TIME_LIMIT_S": "6", "CUDA_AGENT_VISIBILITY_TIMEOUT_S": "8"}
    first = spawn(["worker", "dataset", "--concurrency", "1"], env, "worker-a")
    base = start_api(spawn, env, "dataset")

    body = {"queue": "dataset", "echo": "survivor", "sleep_s": 3}
    headers = {**auth, "Idempotency-Key": "redelivery-test"}
    job_id = httpx.post(f"{base}/v1/probe", json=body, headers=headers, timeout=10).json()["id"]
    wait_job(base, job_id, {"running"}, auth, timeout=60)
    first.kill()  # SIGKILL to the whole group: the task's process dies mid-task, unacknowledged

    assert stored_job(pg_url, job_id).status.value == "running"
    time.sleep(9)  # past the visibility timeout: the new worker restores the unacked message at start
    spawn(["worker", "dataset", "--concurrency", "1"], env, "worker-b")
    job = wait_job(base, job_id, {"succeeded", "failed"}, auth, timeout=90)
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
        assert len(session.scalars(select(Job).where(Job.idempotency_key.endswith(":redelivery-test"))).all()) == 1
    engine.dispose()


def test_routes_need_a_key_and_tenants_see_only_their_jobs(stack_env, spawn, auth):
    from cuda_agent.api.auth import create_api_key

    base = start_api(spawn, {**stack_env, "CUDA_AGENT_RATE_LIMIT_PER_MINUTE": "3"}, "agent")
    assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200  # health needs no key
    assert httpx.post(f"{base}/v1/probe", json={}, timeout=5).status_code == 401
    bad = httpx.post(f"{base}/v1/probe", json={}, headers={"X-API-Key": "ca_nope"}, timeout=5)
    assert bad.status_code == 401 and "invalid" in bad.json()["detail"]

    job_id = httpx.post(f"{base}/v1/probe", json={}, headers=auth, timeout=5).json()["id"]
    other = {"X-API-Key": create_api_key("tenant-b")}
    assert httpx.get(f"{base}/v1/jobs/{job_id}", headers=other, timeout=5).status_code == 404
    assert httpx.get(f"{base}/v1/jobs/{job_id}", headers=auth, timeout=5).status_code == 200

    codes = [
        httpx.get(f"{base}/v1/jobs/{job_id}", headers=auth, timeout=5).status_code for _ in range(10)
    ]  # 12 hits over a limit of 3: a 429 even across a window edge
    assert 429 in codes, codes
    limited = httpx.get(f"{base}/v1/jobs/{job_id}", headers=auth, timeout=5)
    assert limited.status_code == 429 and "rate limit" in limited.json()["detail"]
    assert int(limited.headers["Retry-After"]) > 0
    # Another tenant keeps its own budget.
    assert httpx.get(f"{base}/v1/jobs/{job_id}", headers=other, timeout=5).status_code == 404
