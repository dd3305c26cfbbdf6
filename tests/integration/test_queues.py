"""Every queue carries a task end to end through real Redis and real Celery workers into real Postgres; routes need a
key and tenants see only their jobs. Faults (killed workers, restarted Redis) are in test_faults.py."""

from __future__ import annotations

import httpx
import pytest

from cuda_agent.contracts.common import QueueName
from tests.integration.conftest import start_api, stored_job, wait_job

pytestmark = pytest.mark.integration


@pytest.mark.slow  # a worker per queue, started and stopped: half a minute
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


def test_routes_need_a_key_and_tenants_see_only_their_jobs(private_redis, stack_env, spawn, auth):
    from cuda_agent.api.auth import create_api_key

    # A Redis of its own: the rate counters of the shared test database also count other tests' requests.
    env = {**stack_env, "REDIS_URL": private_redis.url, "CUDA_AGENT_RATE_LIMIT_PER_MINUTE": "3"}
    base = start_api(spawn, env, "agent")
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
