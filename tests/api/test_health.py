"""Health output names no secrets, and a broker outage does not take authenticated routes down with it
(regressions of issue 11)."""

from __future__ import annotations

import logging
import uuid

import pytest

from cuda_agent.api import auth
from cuda_agent.settings import get_settings
from tests.api.conftest import Clients, Tenants

pytestmark = pytest.mark.integration

DEAD_REDIS = "redis://:hunter2@127.0.0.1:1/0"  # nothing listens on port 1


def test_readiness_says_what_failed_without_urls_or_passwords(
    tenants: Tenants, clients: Clients, monkeypatch: pytest.MonkeyPatch
) -> None:
    ready = {"ready": True, "checks": {"database": {"ok": True}, "broker": {"ok": True}}}
    assert clients["compile"].get("/readyz").json() == ready
    monkeypatch.setenv("REDIS_URL", DEAD_REDIS)
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://postgres:hunter3@127.0.0.1:1/nothing")
    get_settings.cache_clear()
    for service in ("compile", "eval", "agent", "dataset", "trainer"):
        response = clients[service].get("/readyz")
        assert response.status_code == 503
        assert response.json()["checks"] == {
            "database": {"ok": False, "error": "OperationalError"},
            "broker": {"ok": False, "error": "ConnectionError"},
        }
        assert not any(secret in response.text for secret in ("hunter", "127.0.0.1", "postgres", "redis:"))


def test_a_broker_outage_falls_back_to_local_rate_limits(
    tenants: Tenants, clients: Clients, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(auth, "rate_limiter", auth.RateLimiter())  # no counts from earlier tests
    monkeypatch.setenv("REDIS_URL", DEAD_REDIS)
    monkeypatch.setenv("CUDA_AGENT_RATE_LIMIT_PER_MINUTE", "3")
    get_settings.cache_clear()
    headers = Tenants.header(tenants.a)
    with caplog.at_level(logging.WARNING, logger="cuda_agent.api.auth"):
        statuses = [clients["agent"].get(f"/v1/jobs/{uuid.uuid4().hex}", headers=headers).status_code for _ in range(4)]
    assert statuses == [404, 404, 404, 429]
    assert "Redis does not answer; counting in this process" in caplog.text
    assert "hunter2" not in caplog.text
    # Another tenant has its own count.
    assert clients["agent"].get(f"/v1/jobs/{uuid.uuid4().hex}", headers=Tenants.header(tenants.b)).status_code == 404
