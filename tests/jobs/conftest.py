"""Fixtures for the job layer's own tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import RedisServer


@pytest.fixture
def broker(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """A Redis of this test alone (the shared test database is flushed by other tests at any moment), REDIS_URL
    pointing at it, and the process's Celery app (built at import, from the settings of that moment) replaced by
    one bound to it."""
    from cuda_agent.queue.app import make_celery
    from cuda_agent.settings import get_settings

    server = RedisServer(tmp_path)
    server.start()
    monkeypatch.setenv("REDIS_URL", server.url)
    get_settings.cache_clear()
    app = make_celery()
    monkeypatch.setattr("cuda_agent.queue.celery_app", app)
    yield server
    app.close()
    server.stop()
