"""Shared fixtures: settings isolation, a fresh Postgres database, a clean Redis database, GPU skipping."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get("CUDA_AGENT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_TEST_URL = os.environ.get("CUDA_AGENT_TEST_REDIS", "redis://127.0.0.1:6379/11")

# Tests never read the developer's environment or data dir.
for _var in ("DATABASE_URL", "REDIS_URL", "CUDA_AGENT_DATABASE_URL", "CUDA_AGENT_REDIS_URL"):
    os.environ.pop(_var, None)
os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With REPORT_FAILURES_AT_ONCE set (the GPU host's runs), each failure is printed as it happens: a run killed
    at the device's time limit still shows what failed and why, which pytest prints only at the end."""
    if report.failed and os.environ.get("REPORT_FAILURES_AT_ONCE"):
        sys.stderr.write(f"\nFAILED {report.nodeid} ({report.when}):\n{report.longreprtext[-6000:]}\n")
        sys.stderr.flush()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/device_gpu_tests.sh on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts embedded, on its own data dir, with settings re-read."""
    from cuda_agent.settings import get_settings

    monkeypatch.setenv("CUDA_AGENT_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    monkeypatch.setenv("CUDA_AGENT_ENVIRONMENT", "test")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture
def embedded_db() -> None:
    """The embedded SQLite default, migrated."""
    from cuda_agent.db import upgrade_database

    upgrade_database()


def create_database(name: str) -> str:
    from sqlalchemy import create_engine, text

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def drop_database(name: str) -> None:
    from sqlalchemy import create_engine, text

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def pg_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh, migrated Postgres database for this test; DATABASE_URL points at it."""
    from cuda_agent.db import upgrade_database
    from cuda_agent.settings import get_settings

    name = f"cuda_agent_test_{uuid.uuid4().hex[:10]}"
    url = create_database(name)
    monkeypatch.setenv("DATABASE_URL", url)
    get_settings.cache_clear()
    upgrade_database()
    yield url
    drop_database(name)


@pytest.fixture
def redis_url() -> Iterator[str]:
    import redis

    client = redis.Redis.from_url(REDIS_TEST_URL)
    client.flushdb()
    yield REDIS_TEST_URL
    client.flushdb()


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real `cuda-agent` command in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "cuda_agent.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def sleep_marker() -> str:
    """A `sleep` duration unique to one test, which finds its processes in /proc by it, and far longer than any
    test's time limit (a short one would end by itself and pass or fail a kill test by luck)."""
    return f"{100 + uuid.uuid4().int % 900}.{uuid.uuid4().int % 9973}"


@pytest.fixture(scope="session")
def workdir_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One data dir for the session's workdir-form builds: the precompiled torch header (about a minute of CPU)
    is built once."""
    path = tmp_path_factory.mktemp("workdir_data")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def shared_cache(isolated_settings: None, workdir_data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test uses the session's data dir (build cache and artifacts) instead of its own."""
    from cuda_agent.settings import get_settings

    monkeypatch.setenv("CUDA_AGENT_DATA_DIR", str(workdir_data_dir))
    get_settings.cache_clear()
    return workdir_data_dir
