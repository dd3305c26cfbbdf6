"""The bad-input part: schemathesis over every operation of every service (cuda_agent.api.fuzz), valid and invalid
requests with a valid key: any 5xx, or an exception out of the app, fails the operation.

Each service is fuzzed in its own child process, in-process against its ASGI app on the stack's Postgres, with a
Redis database no worker consumes: the generated jobs are stored and queued, never run. A child per service keeps
the broker setting (read once at import by the Celery app) and hypothesis' state out of the suite's process.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from dataclasses import asdict

from cuda_agent.selftest.report import PartReport
from cuda_agent.selftest.stack import SERVICES, TENANTS, Stack

MAX_EXAMPLES = 20  # per operation and generation mode (valid, invalid)
FUZZ_TIMEOUT_S = 600


def fuzz_service(service: str, api_key: str, max_examples: int) -> None:
    """Child process entry: fuzz one service and print its FuzzReport as JSON."""
    from cuda_agent.api.fuzz import fuzz_app

    app = importlib.import_module(f"services.{service}_svc.api").app
    found = fuzz_app(app, api_key, max_examples=max_examples)
    print(
        json.dumps(
            {"operations": found.operations, "tried": found.tried, "failures": [asdict(f) for f in found.failures]}
        )
    )


def run_badinput_part(stack: Stack, report: PartReport, max_examples: int = MAX_EXAMPLES) -> None:
    env = stack.child_env()
    env["REDIS_URL"] = stack.redis_url.rsplit("/", 1)[0] + "/1"  # a database no worker consumes
    requests = 0
    for service in SERVICES:
        argv = [
            sys.executable,
            "-m",
            "cuda_agent.selftest.badinput",
            service,
            stack.keys[TENANTS[0]],
            str(max_examples),
        ]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=FUZZ_TIMEOUT_S)
        if done.returncode != 0:
            report.add(f"{service}: fuzz", False, f"the fuzzer exited {done.returncode}: {done.stderr.strip()[-300:]}")
            continue
        found = json.loads(done.stdout.strip().splitlines()[-1])
        requests += found["tried"]
        failures: dict[str, list[dict[str, object]]] = {}
        for failure in found["failures"]:
            failures.setdefault(failure["operation"], []).append(failure)
        for operation in sorted(failures):
            first = failures[operation][0]
            example = f"e.g. {first['status']} {first['detail']} for {first['request']}"
            report.add(f"{service} {operation}", False, f"{len(failures[operation])} answers >= 500, {example}")
        for _ in range(found["operations"] - len(failures)):
            report.add(f"{service}: operation without 5xx", True)
    report.notes["requests"] = requests


if __name__ == "__main__":
    fuzz_service(sys.argv[1], sys.argv[2], int(sys.argv[3]))
