"""Faults on the real stack (Postgres, Redis, Celery worker processes, the APIs): a job is never lost and never
finishes twice when a worker's pool child or main process is killed, a worker is paused past its lease, Redis
restarts without its data, or Postgres drops the workers' connections; concurrent submissions respect the
tenant's limit exactly."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import create_engine, text

from cuda_agent.contracts.common import JobStatus
from tests.agent.agent_fixtures import PROBLEM
from tests.integration.conftest import RedisServer, lease_pid, start_api, stored_job, wait_stored

# Each kills or pauses real workers and waits out leases: the slow tier (CI runs it).
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def submit_probe(base: str, auth: dict[str, str], sleep_s: float, echo: str, key: str | None = None) -> str:
    headers = {**auth, "Idempotency-Key": key} if key else auth
    body = {"queue": "dataset", "echo": echo, "sleep_s": sleep_s}
    response = httpx.post(f"{base}/v1/probe", json=body, headers=headers, timeout=10)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def running(job) -> bool:
    return job.status is JobStatus.RUNNING and job.lease_owner is not None


def finished(job) -> bool:
    return job.status.terminal


def parent_pid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def assert_finished_once(pg_url: str, job_id: str, min_attempts: int, settle_s: float = 5.0) -> None:
    """The job succeeded with the result of its last attempt (the lease holder), after at least ``min_attempts``
    (a starved test host may cost one more), and nothing (a late duplicate, a sweep) changes it after."""
    job = stored_job(pg_url, job_id)
    assert job.status is JobStatus.SUCCEEDED, (job.status, job.error)
    assert job.attempts >= min_attempts and job.result is not None and job.result["attempt"] == job.attempts
    time.sleep(settle_s)  # past a lease and several sweeps
    later = stored_job(pg_url, job_id)
    assert (later.status, later.attempts, later.result, later.finished_at) == (
        job.status,
        job.attempts,
        job.result,
        job.finished_at,
    )


def test_pool_child_killed_mid_task_runs_again_exactly_once(stack_env, spawn, pg_url, auth):
    # An OOM kill takes the pool child, not the worker: Celery redelivers at once while the dead attempt's lease is
    # still live (ignored as a duplicate); when the lease expires the sweep sends the job again.
    spawn(["worker", "dataset", "--concurrency", "1"], stack_env, "worker")
    base = start_api(spawn, stack_env, "dataset")
    job_id = submit_probe(base, auth, sleep_s=3, echo="oom")
    victim = lease_pid(wait_stored(pg_url, job_id, running))
    os.kill(victim, signal.SIGKILL)

    started = time.monotonic()
    job = wait_stored(pg_url, job_id, finished, timeout=45)
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert job.result is not None and job.result["pid"] != victim and job.result["echo"] == "oom"
    assert time.monotonic() - started < 30  # lease (3 s) + sweep (1 s) + the probe's 3 s, with slack for load
    assert_finished_once(pg_url, job_id, min_attempts=2)


def test_worker_main_process_killed_another_worker_finishes(stack_env, spawn, pg_url, auth):
    # The visibility timeout is an hour here: recovery must come from the expired lease, not from Redis.
    env = {**stack_env, "CUDA_AGENT_VISIBILITY_TIMEOUT_S": "3600"}
    workers = [spawn(["worker", "dataset", "--concurrency", "1"], env, f"worker-{name}") for name in "ab"]
    base = start_api(spawn, env, "dataset")
    job_id = submit_probe(base, auth, sleep_s=3, echo="survivor", key="main-kill")
    first_attempt = lease_pid(wait_stored(pg_url, job_id, running))
    (victim,) = [w for w in workers if w.popen.pid == parent_pid(first_attempt)]
    victim.kill()  # SIGKILL to the worker's process group: main process and pool child, message unacknowledged

    started = time.monotonic()
    job = wait_stored(pg_url, job_id, finished, timeout=60)
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert job.result is not None and job.result["pid"] != first_attempt  # the other worker ran it
    assert time.monotonic() - started < 40
    assert_finished_once(pg_url, job_id, min_attempts=2)

    # A client retry finds the same job, and a stray late delivery of the finished job changes nothing.
    assert submit_probe(base, auth, sleep_s=3, echo="survivor", key="main-kill") == job_id
    from cuda_agent.jobs import run_job

    before = stored_job(pg_url, job_id)
    run_job(job_id)
    after = stored_job(pg_url, job_id)
    assert (after.attempts, after.result, after.finished_at) == (before.attempts, before.result, before.finished_at)


def test_attempt_paused_past_its_lease_stores_nothing(stack_env, spawn, pg_url, auth):
    # A paused worker (SIGSTOP; a long GC pause or a frozen VM alike) loses its lease to a new attempt. When it
    # resumes and finishes first, its outcome is discarded: only the lease holder stores a result.
    spawn(["worker", "dataset", "--concurrency", "2"], stack_env, "worker")
    base = start_api(spawn, stack_env, "dataset")
    job_id = submit_probe(base, auth, sleep_s=5, echo="paused")
    first = lease_pid(wait_stored(pg_url, job_id, running))
    os.kill(first, signal.SIGSTOP)
    try:
        wait_stored(pg_url, job_id, lambda j: running(j) and j.attempts >= 2, timeout=30)
    finally:
        os.kill(first, signal.SIGCONT)  # resumes while attempt 2 still sleeps: attempt 1 ends first

    job = wait_stored(pg_url, job_id, finished, timeout=60)
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert job.result is not None and job.result["pid"] != first
    assert_finished_once(pg_url, job_id, min_attempts=2)


def test_redis_restart_loses_queued_message_and_the_sweep_sends_it_again(
    private_redis: RedisServer, stack_env, spawn, pg_url, auth
):
    # private_redis comes first so that it stops last, after the worker and the API.
    env = {**stack_env, "REDIS_URL": private_redis.url}
    spawn(["worker", "dataset", "--concurrency", "1"], env, "worker")
    base = start_api(spawn, env, "dataset")
    busy = submit_probe(base, auth, sleep_s=3, echo="busy")
    wait_stored(pg_url, busy, running)
    waiting = submit_probe(base, auth, sleep_s=0, echo="waiting")  # behind the busy one: its message sits in Redis
    broker = redis.Redis.from_url(private_redis.url)
    assert broker.llen("dataset") == 1

    private_redis.restart()  # keeps nothing on disk: the waiting message is gone
    assert broker.llen("dataset") == 0 and stored_job(pg_url, waiting).status is JobStatus.QUEUED

    for job_id in (busy, waiting):
        job = wait_stored(pg_url, job_id, finished, timeout=60)
        assert job.status is JobStatus.SUCCEEDED, (job_id, job.error)
    assert stored_job(pg_url, waiting).result["echo"] == "waiting"  # type: ignore[index]


def test_postgres_connections_dropped_mid_job(stack_env, spawn, pg_url, auth):
    spawn(["worker", "dataset", "--concurrency", "1"], stack_env, "worker")
    base = start_api(spawn, stack_env, "dataset")
    job_id = submit_probe(base, auth, sleep_s=4, echo="pg")
    wait_stored(pg_url, job_id, running)

    # For 4 s, every backend of the test database but this one is terminated every 0.2 s: the worker's heartbeats,
    # cancellation checks, sweeps and its final write all meet dead connections.
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    terminated = 0
    with admin.connect() as conn:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            terminated += len(
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                ).all()
            )
            time.sleep(0.2)
    admin.dispose()
    assert terminated > 0

    job = wait_stored(pg_url, job_id, finished, timeout=60)
    assert job.status is JobStatus.SUCCEEDED, job.error
    # Retried if its heartbeats were starved past the lease, but never lost and never finished twice.
    assert_finished_once(pg_url, job_id, min_attempts=1)


def test_concurrent_optimize_submissions_respect_the_limit_exactly(stack_env, spawn, auth):
    # No rollout worker: accepted jobs stay queued and hold their slots.
    base = start_api(spawn, {**stack_env, "CUDA_AGENT_MAX_CONCURRENT_JOBS": "4"}, "agent")
    body = {"problem_source": PROBLEM, "policy": "heuristic", "config": {"device": "cpu"}}
    barrier = threading.Barrier(10)
    codes: list[int] = []

    def submit() -> None:
        with httpx.Client(timeout=30) as client:
            barrier.wait()
            codes.append(client.post(f"{base}/v1/optimize", json=body, headers=auth).status_code)

    threads = [threading.Thread(target=submit) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [202] * 4 + [429] * 6, codes
    refused = httpx.post(f"{base}/v1/optimize", json=body, headers=auth, timeout=10)
    assert refused.status_code == 429 and "limit 4" in refused.json()["detail"]
    assert int(refused.headers["Retry-After"]) > 0
