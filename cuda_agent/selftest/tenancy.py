"""The auth and tenancy part: every /v1 route of every service (read from its OpenAPI schema, so a new route is
covered without editing this file) answers 401 without a key and with a bad one, and 404 to another tenant for
every object kind in its path, and a list route (a GET without objects in its path) names none of the first
tenant's objects to the second; objects named in a body, idempotency keys, operator secrets and the public health
routes are checked the same way.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from typing import Any

import httpx

from cuda_agent.contracts.candidate import CandidateSource
from cuda_agent.selftest.problems import TRANSPOSE_PROBLEM, evaluation_request, fresh_candidate
from cuda_agent.selftest.report import PartReport
from cuda_agent.selftest.sandbox import optimize_body
from cuda_agent.selftest.stack import SERVICES, TENANTS, Stack

OWNER, OTHER = TENANTS
PUBLIC = ("/healthz", "/readyz", "/metrics", "/openapi.json", "/ui/", "/ui/app.js")


def owned_objects(stack: Stack) -> dict[str, str]:
    """One object of every kind, owned by the first tenant: path parameter name -> id."""
    probe = stack.post("agent", "/v1/probe", {"queue": "compile", "echo": "tenancy"}).json()["id"]
    candidate = fresh_candidate()
    built = stack.post("compile", "/v1/compile", {"candidate": candidate, "device": stack.device.value}).json()
    built = stack.wait_job("compile", built["id"], timeout_s=300)
    # A problem no other tenant sends: problems are shared rows, visible to each tenant that worked on them.
    body = optimize_body(stack, [])
    body["problem_source"] = f"# tenancy {uuid.uuid4().hex}\n{body['problem_source']}"
    rollout = stack.post("agent", "/v1/optimize", body).json()
    rollout = stack.wait_job("agent", rollout["id"], timeout_s=300)
    trajectory_id = (rollout.get("result") or {}).get("trajectory_id") or ""
    trajectory = stack.get("agent", f"/v1/trajectories/{trajectory_id}").json() if trajectory_id else {}
    # Datasets and training runs take minutes to make through their jobs; their rows are what ownership is about.
    from cuda_agent.dataset.store import save_dataset
    from cuda_agent.train.store import create_run

    run_id = uuid.uuid4().hex
    create_run(run_id, "rft", {}, tenant=OWNER)
    return {
        "job_id": probe,
        "dataset_id": save_dataset(f"tenancy-{run_id}", [], tenant=OWNER),
        "run_id": run_id,
        "artifact_key": (built.get("result") or {}).get("artifact_key") or "",
        "trajectory_id": trajectory_id,
        "problem_id": trajectory.get("problem_id") or "",
        "candidate_key": CandidateSource.model_validate(candidate).key,
    }


def _call(base: str, method: str, path: str, headers: dict[str, str]) -> int:
    """The status code; 0 when the call got no answer. Bodies are irrelevant: authentication comes first."""
    try:
        return httpx.request(method, base + path, headers=headers, json={}, timeout=30).status_code
    except httpx.HTTPError:
        return 0


def routes(stack: Stack, service: str) -> list[tuple[str, str]]:
    schema = httpx.get(stack.urls[service] + "/openapi.json", timeout=30).json()
    return [
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        if path.startswith("/v1/")
        for method in operations
        if method in ("get", "post", "put", "patch", "delete")
    ]


def check_routes(stack: Stack, report: PartReport, objects: dict[str, str]) -> None:
    for service in SERVICES:
        base = stack.urls[service]
        for method, template in routes(stack, service):
            params = re.findall(r"{(\w+)}", template)
            missing = [p for p in params if not objects.get(p)]
            name = f"{service} {method} {template}"
            if missing:
                report.add(name, False, f"no object of kind {missing} to test with: add one to owned_objects")
                continue
            path = template.format(**objects)
            for label, headers in (("no key", {}), ("bad key", {"Authorization": "Bearer ca_not-a-key"})):
                status = _call(base, method, path, headers)
                report.add(f"{name}: {label}", status == 401, f"answered {status}, expected 401")
            if params:
                status = _call(base, method, path, stack.headers(OTHER))
                report.add(f"{name}: other tenant", status == 404, f"answered {status} to another tenant, expected 404")
                if method == "GET":
                    status = _call(base, method, path, stack.headers(OWNER))
                    report.add(f"{name}: owner", status == 200, f"answered {status} to the owner, expected 200")
            elif method == "GET":
                check_listing(base, name, path, report, stack, objects)


def check_listing(base: str, name: str, path: str, report: PartReport, stack: Stack, objects: dict[str, str]) -> None:
    """A list route names some of the owner's objects to the owner (so the check below is not vacuous) and none of
    them to another tenant."""
    for tenant, label in ((OWNER, "owner's list"), (OTHER, "other tenant's list")):
        try:
            response = httpx.get(base + path, headers=stack.headers(tenant), timeout=30)
        except httpx.HTTPError as exc:
            report.add(f"{name}: {label}", False, f"no answer: {type(exc).__name__}")
            continue
        shown = sorted(kind for kind, value in objects.items() if value and value in response.text)
        held = response.status_code == 200 and (bool(shown) if tenant == OWNER else not shown)
        report.add(
            f"{name}: {label}", held, f"answered {response.status_code}, naming the owner's {shown or 'nothing'}"
        )


def check_body_references(stack: Stack, report: PartReport, objects: dict[str, str]) -> None:
    """An artifact key in an evaluation request is an object reference too: another tenant may not use it."""
    body = {**evaluation_request(stack.device), "artifact_key": objects["artifact_key"]}
    response = stack.post("eval", "/v1/evaluate", body, tenant=OTHER, params={"wait_s": 0})
    if response.status_code >= 400:
        report.add("evaluate with another tenant's artifact", 400 <= response.status_code < 500, response.text[:200])
        return
    job = stack.wait_job("eval", response.json()["id"], tenant=OTHER, timeout_s=300)
    verdict = (job.get("result") or {}).get("status")
    report.add(
        "evaluate with another tenant's artifact",
        job["status"] != "succeeded" or verdict not in ("correct", "incorrect"),
        f"accepted and evaluated ({verdict}): a tenant can run another tenant's build",
    )


def check_idempotency_scope(stack: Stack, report: PartReport) -> None:
    key = {"Idempotency-Key": f"tenancy-{uuid.uuid4().hex}"}
    mine = stack.post("agent", "/v1/probe", {"queue": "compile"}, headers=key).json()["id"]
    theirs = stack.post("agent", "/v1/probe", {"queue": "compile"}, tenant=OTHER, headers=key)
    report.add(
        "idempotency key scoped by tenant",
        theirs.status_code in (200, 202) and theirs.json()["id"] != mine,
        f"another tenant's request with the same key answered {theirs.status_code}: {theirs.text[:120]}",
    )
    build = {"candidate": fresh_candidate(), "device": stack.device.value}
    other_kind = stack.post("compile", "/v1/compile", build, params={"wait_s": 0}, headers=key)
    reused = other_kind.status_code in (200, 202) and other_kind.json()["id"] == mine
    report.add("idempotency key scoped by job kind", not reused, "a compile request got the probe job of the same key")


def check_operator_secrets(stack: Stack, report: PartReport) -> None:
    """A tenant cannot point the LLM policy at its own server (and receive the operator's key there)."""
    before = stack.listener.connections
    body = {
        "problem_source": TRANSPOSE_PROBLEM,
        "policy": "openai",
        "policy_options": {"base_url": f"http://127.0.0.1:{stack.listener.port}/v1", "model": "m"},
        "config": {"device": stack.device.value, "max_turns": 1},
    }
    response = stack.post("agent", "/v1/optimize", body)
    if response.status_code in (200, 202):
        with contextlib.suppress(TimeoutError):
            stack.wait_job("agent", response.json()["id"], timeout_s=120)
    reached = stack.listener.connections > before
    leaked = stack.leaked(stack.listener.received.decode("latin-1"))
    report.add(
        "policy endpoint is operator-only",
        400 <= response.status_code < 500 and not reached,
        f"answered {response.status_code}; the tenant's server was called: {reached}; secrets sent: {leaked}",
    )


def check_public_routes(stack: Stack, report: PartReport) -> None:
    for service in SERVICES:
        for path in PUBLIC:
            response = httpx.get(stack.urls[service] + path, timeout=30)
            leaked = stack.leaked(response.text)
            report.add(f"{service} GET {path}: no secrets", not leaked, f"shows {leaked} without a key")


def run_tenancy_part(stack: Stack, report: PartReport) -> None:
    objects: dict[str, Any] = owned_objects(stack)
    check_routes(stack, report, objects)
    check_body_references(stack, report, objects)
    check_idempotency_scope(stack, report)
    check_operator_secrets(stack, report)
    check_public_routes(stack, report)
