"""Probe jobs: prove a queue works end to end (a worker takes the message, runs code, the result lands in the DB).

`cuda-agent doctor --queues` and the integration tests send one through every queue. ``sleep_s`` lets the
redelivery test kill a worker while the probe is running.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from typing import Any

from cuda_agent.contracts.common import JobKind
from cuda_agent.jobs.registry import JobContext, register_handler


@register_handler(JobKind.PROBE)
def run_probe(request: dict[str, Any], context: JobContext) -> dict[str, Any]:
    sleep_s = float(request.get("sleep_s", 0.0))
    deadline = time.monotonic() + sleep_s
    while time.monotonic() < deadline:
        if context.is_cancelled():
            return {"cancelled": True}
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    return {
        "echo": request.get("echo"),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "python": platform.python_version(),
        "attempt": context.attempt,
    }
