"""The load part (on demand): many clients at once on loopback. Every submission must be accepted (one tenant per
optimize client, so the per-tenant concurrency limit is not what is measured), every job must finish, and the
latency of the submissions is reported (p50/p99)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cuda_agent.selftest.problems import evaluation_request
from cuda_agent.selftest.report import PartReport
from cuda_agent.selftest.sandbox import optimize_body
from cuda_agent.selftest.stack import Stack

OPTIMIZE_CLIENTS = 50
EVALUATIONS = 500
CLIENT_THREADS = 50
DRAIN_S_PER_JOB = 5.0  # how long each queued job may take to finish, one worker per queue on this host


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _timed_post(stack: Stack, service: str, path: str, body: dict[str, Any], tenant: str) -> tuple[float, int, str]:
    started = time.monotonic()
    try:
        response = stack.post(service, path, body, tenant=tenant, params={"wait_s": 0} if service == "eval" else None)
    except Exception as exc:  # a refused or dropped connection counts as not accepted
        return time.monotonic() - started, 0, f"{type(exc).__name__}: {exc}"
    job_id = response.json().get("id", "") if response.status_code in (200, 202) else response.text[:150]
    return time.monotonic() - started, response.status_code, job_id


def _burst(
    stack: Stack, report: PartReport, label: str, service: str, path: str, bodies: list[tuple[str, dict[str, Any]]]
) -> None:
    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        answers = list(pool.map(lambda tb: _timed_post(stack, service, path, tb[1], tb[0]), bodies))
    latencies = [a[0] for a in answers]
    report.notes[f"{label} p50"] = f"{percentile(latencies, 0.5) * 1000:.0f} ms"
    report.notes[f"{label} p99"] = f"{percentile(latencies, 0.99) * 1000:.0f} ms"
    refused = [(status, detail) for _, status, detail in answers if status not in (200, 202)]
    report.add(f"{label}: all {len(bodies)} accepted", not refused, f"{len(refused)} refused, e.g. {refused[:1]}")
    accepted = [
        (tenant, detail)
        for (tenant, _), (_, status, detail) in zip(bodies, answers, strict=True)
        if status in (200, 202)
    ]
    deadline = time.monotonic() + 60 + DRAIN_S_PER_JOB * len(accepted)
    lost, failed = 0, 0
    for tenant, job_id in accepted:
        try:
            job = stack.wait_job(service, job_id, tenant=tenant, timeout_s=max(1.0, deadline - time.monotonic()))
            failed += job["status"] != "succeeded"
        except TimeoutError:
            lost += 1
    report.add(
        f"{label}: none lost", lost == 0 and failed == 0, f"{lost} unfinished, {failed} failed of {len(accepted)}"
    )


def run_load_part(
    stack: Stack, report: PartReport, optimize_clients: int = OPTIMIZE_CLIENTS, evaluations: int = EVALUATIONS
) -> None:
    from cuda_agent.api.auth import create_api_key

    tenants = [f"load-{i}" for i in range(optimize_clients)]
    for tenant in tenants:
        stack.keys[tenant] = create_api_key(tenant, "selftest load")
    rollout = optimize_body(stack, [])
    _burst(stack, report, "optimize", "agent", "/v1/optimize", [(t, rollout) for t in tenants])
    bodies = [(tenants[i % len(tenants)], evaluation_request(stack.device)) for i in range(evaluations)]
    _burst(stack, report, "evaluate", "eval", "/v1/evaluate", bodies)
