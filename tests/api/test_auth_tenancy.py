"""Auth and tenancy on every route of every service: no key, no answer (401); another tenant's job, event stream,
trajectory or artifact does not exist (404, the same answer as for an id nobody has)."""

from __future__ import annotations

import re
import uuid

import pytest

from cuda_agent.agent.jobs import store_trajectory
from cuda_agent.api.auth import SERVICE_TENANT, create_api_key
from cuda_agent.contracts.agent import RolloutConfig, Trajectory
from tests.agent.agent_fixtures import PROBLEM
from tests.api.conftest import SERVICES, Clients, Tenants, service_app

pytestmark = pytest.mark.integration

HEALTH_ROUTES = {"/healthz", "/readyz", "/metrics"}
KERNEL = """#include <cstdint>
extern "C" void scale(const float* x, float* y, float k, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = k * x[i];
}
"""
CANDIDATE = {"form": "project", "files": {"model_new.py": "x = 1\n", "kernels/scale.cpp": KERNEL}}
COMPILE_BODY = {"candidate": CANDIDATE, "device": "cpu"}
PROFILE_BODY = {"problem_source": PROBLEM, "candidate": CANDIDATE}
EVAL_BODY = PROFILE_BODY | {"device": "cpu"}
OPTIMIZE_BODY = {"problem_source": PROBLEM, "policy": "heuristic", "config": {"device": "cpu"}}


def concrete(path: str) -> str:
    """A route path with well-formed ids that name nothing."""
    return path.replace("{artifact_key}", "0" * 64).replace("{job_id}", "0" * 32).replace("{trajectory_id}", "0" * 32)


@pytest.mark.parametrize("service", SERVICES)
def test_every_route_but_health_needs_a_valid_key(service: str, tenants: Tenants, clients: Clients) -> None:
    # From the OpenAPI schema: FastAPI versions differ in how included routers appear in app.routes.
    routes = [(m.upper(), path) for path, ops in service_app(service).openapi()["paths"].items() for m in ops]
    assert {p for _, p in routes if not p.startswith("/v1/")} == HEALTH_ROUTES
    protected = [(m, p) for m, p in routes if p.startswith("/v1/")]
    assert len(protected) >= 4
    for method, path in protected:
        for headers in ({}, {"Authorization": "Bearer ca_not-a-key"}, {"X-API-Key": "ca_not-a-key"}):
            response = clients[service].request(method, concrete(path), headers=headers, json={})
            assert response.status_code == 401, (method, path, headers, response.text)


def test_no_key_can_be_made_for_the_service_tenant(tenants: Tenants) -> None:
    for name in (SERVICE_TENANT, "", "a" * 65, "-leading-dash", "has space"):
        with pytest.raises(ValueError, match="must be 1-64 letters"):
            create_api_key(name)


def test_another_tenants_jobs_do_not_exist(queued_stack: Tenants, clients: Clients) -> None:
    a, b = Tenants.header(queued_stack.a), Tenants.header(queued_stack.b)
    submitted = [
        clients["compile"].post("/v1/probe", json={}, headers=a),
        clients["compile"].post("/v1/compile", params={"wait_s": 0}, json=COMPILE_BODY, headers=a),
        clients["eval"].post("/v1/evaluate", json=EVAL_BODY, headers=a),
        clients["eval"].post("/v1/profile", json=PROFILE_BODY, headers=a),
        clients["agent"].post("/v1/optimize", json=OPTIMIZE_BODY, headers=a),
    ]
    assert all(r.status_code == 202 for r in submitted), [r.text for r in submitted]
    unknown = uuid.uuid4().hex
    for job_id in [r.json()["id"] for r in submitted]:
        for service in SERVICES:  # every service serves every job route
            client = clients[service]
            for method, path in (("GET", "/v1/jobs/{}"), ("GET", "/v1/jobs/{}/events"), ("POST", "/v1/jobs/{}/cancel")):
                theirs = client.request(method, path.format(job_id), headers=b)
                nobodys = client.request(method, path.format(unknown), headers=b)
                assert theirs.status_code == nobodys.status_code == 404, (service, method, path, theirs.text)
                assert theirs.json()["detail"].replace(job_id, "ID") == nobodys.json()["detail"].replace(unknown, "ID")
        mine = clients["agent"].get(f"/v1/jobs/{job_id}", headers=a)
        assert mine.status_code == 200 and mine.json()["status"] == "queued"  # tenant-b's cancel did nothing


def test_an_idempotency_key_is_the_callers_own(queued_stack: Tenants, clients: Clients) -> None:
    a, b = Tenants.header(queued_stack.a), Tenants.header(queued_stack.b)
    key = {"Idempotency-Key": "nightly-probe-1"}
    first = clients["compile"].post("/v1/probe", json={}, headers=a | key).json()["id"]
    assert clients["compile"].post("/v1/probe", json={}, headers=a | key).json()["id"] == first
    other = clients["compile"].post("/v1/probe", json={}, headers=b | key).json()["id"]
    assert other != first
    assert clients["compile"].get(f"/v1/jobs/{first}", headers=b).status_code == 404


def test_another_tenants_trajectories_do_not_exist(tenants: Tenants, clients: Clients) -> None:
    trajectory = Trajectory(id=uuid.uuid4().hex, policy="heuristic", config=RolloutConfig(), prompt=[])
    store_trajectory(trajectory, tenant="tenant-a")
    agent = clients["agent"]
    for path in ("/v1/trajectories/{}", "/v1/trajectories/{}/export"):
        assert agent.get(path.format(trajectory.id), headers=Tenants.header(tenants.a)).status_code == 200
        theirs = agent.get(path.format(trajectory.id), headers=Tenants.header(tenants.b))
        assert theirs.status_code == 404 and trajectory.id in theirs.json()["detail"]


@pytest.mark.sandbox
def test_artifacts_belong_to_the_tenants_that_built_them(
    tenants: Tenants, clients: Clients, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cuda_agent.settings import get_settings

    service_key = "ca_service-" + uuid.uuid4().hex
    monkeypatch.setenv("CUDA_AGENT_SERVICE_API_KEY", service_key)
    get_settings.cache_clear()
    a, b = Tenants.header(tenants.a), Tenants.header(tenants.b)
    compile_svc, eval_svc = clients["compile"], clients["eval"]

    # Embedded (no broker): the build runs inside the request, in the real sandbox.
    built = compile_svc.post("/v1/compile", params={"wait_s": 0}, json=COMPILE_BODY, headers=a)
    assert built.status_code == 200 and built.json()["result"]["status"] == "ok", built.text
    key = built.json()["result"]["artifact_key"]
    assert re.fullmatch(r"[0-9a-f]{64}", key)

    mine = compile_svc.get(f"/v1/artifacts/{key}", headers=a)
    assert mine.status_code == 200 and mine.content[:2] == b"\x1f\x8b"  # gzip
    assert compile_svc.get(f"/v1/artifacts/{key}", headers=Tenants.header(service_key)).status_code == 200
    theirs = compile_svc.get(f"/v1/artifacts/{key}", headers=b)
    nobodys = compile_svc.get(f"/v1/artifacts/{'f' * 64}", headers=b)
    assert theirs.status_code == nobodys.status_code == 404
    assert theirs.json()["detail"].replace(key, "K") == nobodys.json()["detail"].replace("f" * 64, "K")
    assert compile_svc.get(f"/v1/artifacts/{key}").status_code == 401

    # Nor can tenant-b have a worker load it into a candidate's process.
    for route, body in (("/v1/evaluate", EVAL_BODY), ("/v1/profile", PROFILE_BODY)):
        refused = eval_svc.post(route, json=body | {"artifact_key": key}, headers=b)
        assert refused.status_code == 422 and "artifact_key" in refused.json()["detail"], refused.text

    # Building the same sources (a cache hit) makes it tenant-b's too.
    again = compile_svc.post("/v1/compile", params={"wait_s": 0}, json=COMPILE_BODY, headers=b)
    assert again.json()["result"]["artifact_key"] == key and again.json()["result"]["cache_hit"]
    assert compile_svc.get(f"/v1/artifacts/{key}", headers=b).status_code == 200
