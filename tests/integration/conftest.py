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

from tests.conftest import ROOT


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
        job = httpx.get(f"{base}/v1/jobs/{job_id}", headers=headers, timeout=5).json()
        if job["status"] in statuses:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} stuck in {job['status']}: {job}")
        time.sleep(0.2)
