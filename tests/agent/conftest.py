"""Fixtures of the agent tests: scripted OpenAI-compatible servers."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.fakes.openai_server import FakeOpenAIServer, ScriptItem


@pytest.fixture
def fake_openai() -> Iterator[Callable[..., FakeOpenAIServer]]:
    """Start scripted servers; all are stopped at teardown."""
    servers: list[FakeOpenAIServer] = []

    def start(script: list[ScriptItem], then: ScriptItem | None = None) -> FakeOpenAIServer:
        server = FakeOpenAIServer(script, then=then).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
