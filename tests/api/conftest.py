"""Service apps in-process against the real Postgres, with keys for two tenants.

``queued_stack`` also configures the real Redis as broker with no worker consuming it: submitted jobs are stored
and queued but never run, so requests (and the fuzzer) exercise the APIs, not compiles and evaluations.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

SERVICES = ("compile", "eval", "agent", "dataset", "trainer")


def service_app(service: str) -> FastAPI:
    app: FastAPI = importlib.import_module(f"services.{service}_svc.api").app
    return app


@dataclass
class Tenants:
    a: str  # tenant-a's key
    b: str  # tenant-b's key

    @staticmethod
    def header(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def tenants(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Tenants:
    """Postgres, auth on, generous limits (tests that need a low one set it), keys for tenant-a and tenant-b."""
    from cuda_agent.api.auth import create_api_key
    from cuda_agent.settings import get_settings

    monkeypatch.setenv("CUDA_AGENT_RATE_LIMIT_PER_MINUTE", "1000000")
    monkeypatch.setenv("CUDA_AGENT_MAX_CONCURRENT_JOBS", "1000000")
    get_settings.cache_clear()
    return Tenants(a=create_api_key("tenant-a"), b=create_api_key("tenant-b"))


@pytest.fixture
def queued_stack(tenants: Tenants, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Tenants:
    from cuda_agent.settings import get_settings

    monkeypatch.setenv("REDIS_URL", redis_url)
    get_settings.cache_clear()
    return tenants


class Clients(dict[str, TestClient]):
    """A TestClient per service name, opened on first use. Exceptions out of an app come back as 500s, as from a
    server."""

    def __missing__(self, service: str) -> TestClient:
        client = self[service] = TestClient(service_app(service), raise_server_exceptions=False)
        return client


@pytest.fixture
def clients() -> Iterator[Clients]:
    opened = Clients()
    yield opened
    for client in opened.values():
        client.close()
