#!/usr/bin/env python3
"""Health of a container built from deploy/docker, for the images' HEALTHCHECK.

What to probe follows from the command the container runs (PID 1's command line, or this script's arguments):
``serve``: GET /healthz on the ``--port`` it serves (default $PORT, else 8000); ``worker``: a Celery ping answered by
a worker on this host; anything else (the migrate job, a shell): healthy, there is no long-running service to probe.
Exit status 0 is healthy, 1 unhealthy, with one line on stderr saying why.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.request


def _command_line() -> list[str]:
    if len(sys.argv) > 1:
        return sys.argv[1:]
    with open("/proc/1/cmdline", "rb") as f:
        return [arg.decode() for arg in f.read().split(b"\0") if arg]


def _port(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg.startswith("--port="):
            return arg.split("=", 1)[1]
        if arg == "--port" and i + 1 < len(args):
            return args[i + 1]
    return os.environ.get("PORT", "8000")


def _api_healthy(args: list[str]) -> str | None:
    url = f"http://127.0.0.1:{_port(args)}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return None if response.status == 200 else f"{url} answered {response.status}"
    except OSError as exc:  # URLError and HTTPError are OSErrors
        return f"{url}: {exc}"


def _worker_healthy() -> str | None:
    from celery import Celery

    broker = os.environ.get("REDIS_URL")
    if not broker:
        return "REDIS_URL is not set"
    # Any worker whose node name ends in @<this host> (Celery's default name is celery@%h) lives in this container.
    suffix = "@" + socket.gethostname()
    try:
        replies = Celery(broker=broker).control.ping(timeout=5)
    except Exception as exc:
        # Not the URL itself: it may carry the broker password.
        return f"celery ping through REDIS_URL: {exc}"
    if any(name.endswith(suffix) for reply in replies for name in reply):
        return None
    return f"no Celery worker named *{suffix} answered a ping"


def main() -> int:
    args = _command_line()
    if "serve" in args:
        problem = _api_healthy(args)
    elif "worker" in args:
        problem = _worker_healthy()
    else:
        problem = None
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
