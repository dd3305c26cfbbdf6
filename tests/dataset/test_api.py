"""dataset_svc through the FastAPI TestClient on the real Postgres: a synthesis is accepted as a queued job (Redis
broker, no worker), and stored datasets are listed, summarized and paged; on a GPU host, a cuda synthesis through
real workers measures its problems on the eval queue."""

# The tests/api fixtures are imported by name (pytest finds fixtures in the module); their parameters shadow them.
# ruff: noqa: F811

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from cuda_agent.dataset.export import DatasetRecord
from cuda_agent.dataset.store import save_dataset
from tests.api.conftest import Clients, Tenants, clients, queued_stack, tenants  # noqa: F401  (fixtures)
from tests.dataset.test_jobs import GOOD
from tests.integration.conftest import api_key, auth, spawn, stack_env, start_api, wait_job  # noqa: F401

pytestmark = pytest.mark.integration

BODY = {"n": 5, "seed": 1, "compose": {"shapes": "small"}, "filters": {"device": "cpu", "compile_backend": "aot_eager"}}


def stored_dataset(tenant: str) -> str:
    """Three problems and the statistics and rejections a synthesis stores with them."""
    records = [
        DatasetRecord(
            code=GOOD.replace("8, 64", f"{batch}, 64"),
            ops=["torch.nn.Linear", "torch.relu"],
            data_source="torch#test",
            filters=[{"name": "eager", "passed": True}],
        )
        for batch in (2, 4, 8)
    ]
    rejections = [
        {"index": 0, "stage": "filter:eager", "reason": "RuntimeError: shape mismatch"},
        {"index": 1, "stage": "filter:eager", "reason": "RuntimeError: shape mismatch"},
        {"index": 2, "stage": "duplicate", "reason": "similarity 0.950 to kept problem 4"},
    ]
    stats = {"kept": 3, "removed": {"duplicate": 1, "filter:eager": 2}, "op_counts": {"2": 3}}
    return save_dataset("api-test", records, {"seed": 1, "stats": stats, "rejections": rejections}, tenant=tenant)


def test_synthesis_is_accepted_as_a_queued_job(queued_stack: Tenants, clients: Clients) -> None:
    headers = Tenants.header(queued_stack.a) | {"Idempotency-Key": "synth-1"}
    response = clients["dataset"].post("/v1/datasets", json=BODY, headers=headers)
    assert response.status_code == 202, response.text
    job = response.json()
    assert (job["kind"], job["queue"], job["status"]) == ("synthesize_dataset", "dataset", "queued")
    again = clients["dataset"].post("/v1/datasets", json=BODY | {"n": 6}, headers=headers)
    assert again.json()["id"] == job["id"]  # the key names the first job
    other_tenant = clients["dataset"].get(f"/v1/jobs/{job['id']}", headers=Tenants.header(queued_stack.b))
    assert other_tenant.status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (BODY | {"n": 100_001}, "n"),
        (BODY | {"n": 0}, "n"),
        (BODY | {"name": "../etc"}, "name"),
        (BODY | {"compose": {"op_counts": {"7": 1.0}}}, "op_counts"),
        (BODY | {"compose": {"include": ["x"] * 1001}}, "include"),
        (BODY | {"filters": {"timeout_s": 1e9}}, "timeout_s"),
        (BODY | {"filters": {"time_window_ms": [5, 1]}}, "time_window_ms"),
        (BODY | {"filters": {"device": "tpu"}}, "device"),
        (BODY | {"filters": {"cache_dir": "/tmp"}}, "cache_dir"),
        (BODY | {"similarity_threshold": 2}, "similarity_threshold"),
    ],
)
def test_bad_fields_are_422(body: dict, field: str, tenants: Tenants, clients: Clients) -> None:
    response = clients["dataset"].post("/v1/datasets", json=body, headers=Tenants.header(tenants.a))
    assert response.status_code == 422, response.text
    assert field in response.text


def test_datasets_are_listed_summarized_and_paged(tenants: Tenants, clients: Clients) -> None:
    dataset_id = stored_dataset("tenant-b")
    client, headers = clients["dataset"], Tenants.header(tenants.b)

    listed = client.get("/v1/datasets", headers=headers)
    assert listed.status_code == 200
    assert [(d["id"], d["name"], d["problems"]) for d in listed.json()] == [(dataset_id, "api-test", 3)]

    detail = client.get(f"/v1/datasets/{dataset_id}", headers=headers).json()
    assert detail["stats"]["op_counts"] == {"2": 3} and detail["seed"] == 1
    assert detail["removed_by_reason"] == {
        "duplicate": {"similarity 0.950 to kept problem 4": 1},
        "filter:eager": {"RuntimeError: shape mismatch": 2},
    }

    first = client.get(f"/v1/datasets/{dataset_id}/problems", params={"limit": 2}, headers=headers).json()
    rest = client.get(f"/v1/datasets/{dataset_id}/problems", params={"offset": 2}, headers=headers).json()
    assert (first["total"], len(first["items"]), len(rest["items"])) == (3, 2, 1)
    hashes = [p["source_hash"] for p in first["items"] + rest["items"]]
    assert hashes == sorted(hashes) and len(set(hashes)) == 3
    assert first["items"][0]["ops"] == ["torch.nn.Linear", "torch.relu"] and first["items"][0]["op_count"] == 2
    assert first["items"][0]["filters"] == [{"name": "eager", "passed": True, "reason": None}]

    assert client.get(f"/v1/datasets/{dataset_id}/problems", params={"limit": 501}, headers=headers).status_code == 422
    assert client.get("/v1/datasets", headers={}).status_code == 401


def test_a_dataset_is_its_owners_alone(tenants: Tenants, clients: Clients) -> None:
    dataset_id = stored_dataset("tenant-a")
    client, other = clients["dataset"], Tenants.header(tenants.b)
    assert client.get("/v1/datasets", headers=other).json() == []
    for route in (f"/v1/datasets/{dataset_id}", f"/v1/datasets/{dataset_id}/problems"):
        assert client.get(route, headers=other).status_code == 404
        assert client.get(route, headers=Tenants.header(tenants.a)).status_code == 200
    # The same name is free for another tenant: names are per owner, and taking one reveals nothing.
    assert stored_dataset("tenant-b") != dataset_id


@pytest.mark.parametrize("route", ["/v1/datasets/{}", "/v1/datasets/{}/problems"])
def test_unknown_dataset_is_404(route: str, tenants: Tenants, clients: Clients) -> None:
    response = clients["dataset"].get(route.format("0" * 32), headers=Tenants.header(tenants.a))
    assert response.status_code == 404 and "not found" in response.text


@pytest.mark.gpu
def test_cuda_synthesis_measures_each_problem_on_the_eval_queue(
    stack_env: dict[str, str], spawn: Callable[..., Any], pg_url: str, auth: dict[str, str]
) -> None:
    """The deployment's path: the dataset worker fans the filters out as measure_problem jobs, which an eval worker
    runs on the GPU (CUDA-event timing); the window is wide because small shapes take microseconds."""
    spawn(["worker", "dataset", "--concurrency", "1"], stack_env, "dataset-worker")
    spawn(["worker", "eval", "--concurrency", "1"], stack_env, "eval-worker")
    base = start_api(spawn, stack_env, "dataset")
    filters = {"device": "cuda", "compile_backend": "aot_eager", "time_window_ms": [0.0001, 1000]}
    body = {"n": 3, "seed": 2, "compose": {"shapes": "small"}, "filters": filters}
    response = httpx.post(f"{base}/v1/datasets", json=body, headers=auth, timeout=10)
    assert response.status_code == 202, response.text
    job = wait_job(base, response.json()["id"], {"succeeded", "failed"}, auth, timeout=900)
    assert job["status"] == "succeeded", job
    assert job["result"]["kept"] == 3 and job["progress"] == {"kept": 3, "requested": 3}

    with create_engine(pg_url).connect() as connection:
        measured = connection.execute(
            text("SELECT queue::text, status::text, result FROM jobs WHERE kind = 'measure_problem'")
        ).all()
    assert len(measured) >= 3
    assert {(queue, status) for queue, status, _ in measured} == {("eval", "succeeded")}
    assert sum(1 for *_, result in measured if result["passed"] and result["eager_ms"] > 0) >= 3
    detail = httpx.get(f"{base}/v1/datasets/{job['result']['dataset_id']}", headers=auth, timeout=10).json()
    assert detail["problems"] == 3
