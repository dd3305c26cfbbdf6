"""A forked process (a Celery pool child) never shares its parent's database connection."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import text

from cuda_agent.db import get_engine

pytestmark = pytest.mark.integration


def backend_pid() -> int:
    with get_engine().connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_forked_child_opens_its_own_connection(pg_url: str) -> None:
    parent = backend_pid()  # the pool now keeps this connection for the parent
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the backend it talks to, and leave without running any cleanup
        try:
            os.write(write_end, str(backend_pid()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    child = int(os.read(read_end, 64))
    os.close(read_end)
    assert child != parent
    assert backend_pid() == parent  # the parent's connection is intact after the child exited
