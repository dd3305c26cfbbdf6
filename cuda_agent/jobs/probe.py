"""Probe jobs: prove a queue works end to end (a worker takes the message, runs code, the result lands in the DB).

`cuda-agent doctor --queues` and the integration tests send one through every queue. ``sleep_s`` lets the
redelivery test kill a worker while the probe is running.
"""

from __future__ import annotations

import os
import platform
import socket
import time

from cuda_agent.contracts.jobs import ProbeRequest, ProbeResult
from cuda_agent.jobs.registry import JobContext


def run_probe(request: ProbeRequest, context: JobContext) -> ProbeResult:
    deadline = time.monotonic() + request.sleep_s
    cancelled = False
    while not cancelled and time.monotonic() < deadline:
        cancelled = context.is_cancelled()
        if not cancelled:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    return ProbeResult(
        echo=request.echo,
        host=socket.gethostname(),
        pid=os.getpid(),
        python=platform.python_version(),
        attempt=context.attempt,
        cancelled=cancelled,
    )
