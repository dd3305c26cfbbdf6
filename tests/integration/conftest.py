"""A real stack for integration tests: migrated Postgres database, Redis, API servers and Celery workers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from cuda_agent.db.models import Job
from tests.conftest import ROOT

# Job recovery on a test clock: a dead attempt's lease expires within seconds and every worker sweeps each second,
# so fault tests finish in seconds instead of the production half-minute. Six heartbeats per lease: a test host
# busy enough to miss five in a row hands the job to another attempt, which is correct but costs an attempt.
FAST_RECOVERY = {
    "CUDA_AGENT_JOB_LEASE_S": "3",
    "CUDA_AGENT_JOB_HEARTBEAT_S": "0.5",
    "CUDA_AGENT_JOB_SWEEP_INTERVAL_S": "1",
    "CUDA_AGENT_JOB_REQUEUE_AFTER_S": "3",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Process:
    """A `cuda-agent` child in its own process group, so a kill takes its worker children too."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = log.open("w")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "cuda_agent.cli", *args],
            env=env,
            cwd=ROOT,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)
            self.popen.wait(timeout=30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM) if self.popen.poll() is None else None
        self._out.close()

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def stack_env(pg_url: str, redis_url: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_AGENT_")}
    env.update(
        DATABASE_URL=pg_url,
        REDIS_URL=redis_url,
        CUDA_AGENT_DATA_DIR=str(tmp_path / "data"),
        CUDA_AGENT_ENVIRONMENT="test",
        PYTHONUNBUFFERED="1",
        # Polling a job (wait_job) must not be throttled; the rate limit has its own test, which sets it low.
        CUDA_AGENT_RATE_LIMIT_PER_MINUTE="100000",
        **FAST_RECOVERY,
    )
    return env


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Process]]:
    started: list[Process] = []

    def start(args: list[str], env: dict[str, str], name: str) -> Process:
        proc = Process(args, env, tmp_path / f"{name}-{len(started)}.log")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def start_api(spawn: Callable[..., Process], env: dict[str, str], service: str) -> str:
    port = free_port()
    proc = spawn(["serve", service, "--port", str(port)], env, f"api-{service}")
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{service} API exited:\n{proc.output()}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return base
        except httpx.TransportError:
            time.sleep(0.2)
    raise RuntimeError(f"{service} API did not start:\n{proc.output()}")


@pytest.fixture
def api_key(pg_url: str) -> str:
    from cuda_agent.api.auth import create_api_key

    return create_api_key("tenant-a")


@pytest.fixture
def auth(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


def wait_job(base: str, job_id: str, statuses: set[str], headers: dict[str, str], timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.get(f"{base}/v1/jobs/{job_id}", headers=headers, timeout=5)
        assert response.status_code == 200, response.text
        job = response.json()
        if job["status"] in statuses:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} stuck in {job['status']}: {job}")
        time.sleep(0.2)


def stored_job(pg_url: str, job_id: str) -> Job:
    """The job row as Postgres holds it now (read directly, not through an API that a fault test may disturb)."""
    engine = create_engine(pg_url)
    try:
        with Session(engine) as session:
            job = session.get(Job, job_id)
            assert job is not None
            session.expunge(job)
            return job
    finally:
        engine.dispose()


def wait_stored(pg_url: str, job_id: str, done: Callable[[Job], bool], timeout: float = 60) -> Job:
    """Poll the job row until ``done`` holds; AssertionError with the row when it does not in time."""
    deadline = time.monotonic() + timeout
    while True:
        job = stored_job(pg_url, job_id)
        if done(job):
            return job
        if time.monotonic() > deadline:
            raise AssertionError(
                f"job {job_id}: {job.status.value}, attempts {job.attempts}, owner {job.lease_owner}, {job.error}"
            )
        time.sleep(0.1)


def lease_pid(job: Job) -> int:
    """The pid of the process running the job's current attempt (lease owner "host:pid:token")."""
    assert job.lease_owner is not None, job
    return int(job.lease_owner.split(":")[-2])


class RedisServer:
    """A private redis-server on a loopback port that keeps nothing on disk, so a restart loses every queue."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.workdir,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        import redis

        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()
