"""Bad input gets a 4xx naming the problem, never a 5xx: unbounded numbers, oversized bodies and files, numbers
and text that JSON or Postgres cannot take back, malformed idempotency keys (regressions of issue 11)."""

from __future__ import annotations

import json

import pytest

from cuda_agent.contracts.common import MAX_CANDIDATE_FILES, MAX_SOURCE_CHARS
from tests.agent.agent_fixtures import PROBLEM
from tests.api.conftest import Clients, Tenants

pytestmark = pytest.mark.integration

CANDIDATE = {"form": "project", "files": {"model_new.py": "x = 1\n"}}
EVAL_BODY = {"problem_source": PROBLEM, "candidate": CANDIDATE, "device": "cpu"}
OPTIMIZE_BODY = {"problem_source": PROBLEM, "policy": "heuristic", "config": {"device": "cpu"}}


def messages(response: object) -> str:
    return json.dumps(response.json()["detail"])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/v1/evaluate", EVAL_BODY | {"correctness_trials": 20_000_000}, "correctness_trials"),
        ("/v1/evaluate", EVAL_BODY | {"timing_trials": 10**9}, "timing_trials"),
        ("/v1/evaluate", EVAL_BODY | {"warmup": 10**7}, "warmup"),
        ("/v1/evaluate", EVAL_BODY | {"timeout_s": 1e9}, "timeout_s"),
        ("/v1/optimize", OPTIMIZE_BODY | {"config": {"max_turns": 10_000}}, "max_turns"),
        ("/v1/optimize", OPTIMIZE_BODY | {"config": {"timing_trials": 10**8}}, "timing_trials"),
        ("/v1/optimize", OPTIMIZE_BODY | {"config": {"context_tokens": 10**12}}, "context_tokens"),
        ("/v1/optimize", OPTIMIZE_BODY | {"config": {"bash_timeout_s": 1e12}}, "bash_timeout_s"),
        ("/v1/optimize", OPTIMIZE_BODY | {"config": {"tool_output_chars": 10**10}}, "tool_output_chars"),
        ("/v1/optimize", OPTIMIZE_BODY | {"policy": "openai", "policy_options": {"temperature": 50}}, "temperature"),
        ("/v1/optimize", OPTIMIZE_BODY | {"policy": "openai", "policy_options": {"max_tokens": 10**9}}, "max_tokens"),
        ("/v1/compile", {"candidate": CANDIDATE, "timeout_s": 1e9}, "timeout_s"),
        ("/v1/compile", {"candidate": CANDIDATE, "extra_flags": ["-O2"] * 1000}, "extra_flags"),
        ("/v1/probe", {"echo": "x" * 100_000}, "echo"),
    ],
)
def test_numbers_and_lists_are_bounded(
    route: str, body: dict, field: str, queued_stack: Tenants, clients: Clients
) -> None:
    service = {"/v1/evaluate": "eval", "/v1/optimize": "agent"}.get(route, "compile")
    response = clients[service].post(route, json=body, headers=Tenants.header(queued_stack.a))
    assert response.status_code == 422, response.text
    assert field in messages(response)


def test_wait_is_bounded(queued_stack: Tenants, clients: Clients) -> None:
    response = clients["compile"].post(
        "/v1/compile", params={"wait_s": 10**6}, json={"candidate": CANDIDATE}, headers=Tenants.header(queued_stack.a)
    )
    assert response.status_code == 422 and "wait_s" in messages(response)


def test_candidate_files_are_bounded(queued_stack: Tenants, clients: Clients) -> None:
    headers = Tenants.header(queued_stack.a)
    many = {f"kernels/k{i}.h": "" for i in range(MAX_CANDIDATE_FILES)} | {"model_new.py": ""}
    big = {"model_new.py": "#" * (MAX_SOURCE_CHARS + 1)}
    long_path = {"model_new.py": "", "kernels/" + "a" * 300 + ".h": ""}
    for files, says in ((many, "at most 64"), (big, "more than the limit"), (long_path, "must be 1-255 characters")):
        body = {"candidate": {"form": "project", "files": files}}
        response = clients["compile"].post("/v1/compile", params={"wait_s": 0}, json=body, headers=headers)
        assert response.status_code == 422 and says in messages(response), response.text[:500]
    big_problem = EVAL_BODY | {"problem_source": "#" * (MAX_SOURCE_CHARS + 1)}
    response = clients["eval"].post("/v1/evaluate", json=big_problem, headers=headers)
    assert response.status_code == 422 and "problem_source" in messages(response)
    assert len(response.content) < 10_000  # the 1 MB input is not echoed back


def test_bodies_are_bounded(queued_stack: Tenants, clients: Clients, monkeypatch: pytest.MonkeyPatch) -> None:
    from cuda_agent.settings import get_settings

    monkeypatch.setenv("CUDA_AGENT_MAX_REQUEST_BYTES", "4096")
    get_settings.cache_clear()
    headers = Tenants.header(queued_stack.a) | {"Content-Type": "application/json"}
    body = json.dumps(EVAL_BODY | {"problem_source": PROBLEM + "#" * 8000}).encode()
    for service in ("compile", "eval", "agent", "dataset", "trainer"):
        declared = clients[service].post("/v1/probe", content=body, headers=headers)
        assert declared.status_code == 413 and "larger than 4096 bytes" in declared.json()["detail"]

    def chunks():  # no Content-Length: the limit holds on the streamed body
        for i in range(0, len(body), 1000):
            yield body[i : i + 1000]

    streamed = clients["eval"].post("/v1/evaluate", content=chunks(), headers=headers)
    assert streamed.status_code == 413 and "larger than 4096 bytes" in streamed.json()["detail"]
    small = clients["compile"].post("/v1/probe", json={}, headers=Tenants.header(queued_stack.a))
    assert small.status_code == 202


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ('{"queue": "compile", "sleep_s": NaN}', "sleep_s"),
        ('{"queue": "compile", "sleep_s": 1e400}', "sleep_s"),
        ('{"queue": "compile", "sleep_s": -Infinity}', "sleep_s"),
        ('{"queue": "compile", "echo": 1e400}', "echo"),
        ('{"echo": "\\ud800"}', "lone surrogate"),
        ('{"echo": "a\\u0000b"}', "NUL"),
        ('{"\\ud800": 1}', "lone surrogate"),
    ],
)
def test_unstorable_numbers_and_text_are_refused(raw: str, says: str, queued_stack: Tenants, clients: Clients) -> None:
    headers = Tenants.header(queued_stack.a) | {"Content-Type": "application/json"}
    response = clients["compile"].post("/v1/probe", content=raw.encode(), headers=headers)
    assert response.status_code == 422, response.text
    assert says in messages(response)


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/evaluate", EVAL_BODY | {"problem_source": PROBLEM + "\x00"}),
        ("/v1/evaluate", EVAL_BODY | {"candidate": {"form": "project", "files": {"model_new.py": "\ud800"}}}),
        ("/v1/evaluate", EVAL_BODY | {"correctness_trials": float("nan")}),
        ("/v1/optimize", OPTIMIZE_BODY | {"policy": "replay", "policy_options": {"trajectory": {"x\x00": 1}}}),
        ("/v1/optimize", OPTIMIZE_BODY | {"config": {"wall_clock_s": float("inf")}}),
    ],
)
def test_unstorable_values_anywhere_are_refused(
    route: str, body: dict, queued_stack: Tenants, clients: Clients
) -> None:
    service = "eval" if route == "/v1/evaluate" else "agent"
    raw = json.dumps(body).encode()  # Python's encoder writes NaN, Infinity and lone surrogates as JSON does not
    headers = Tenants.header(queued_stack.a) | {"Content-Type": "application/json"}
    response = clients[service].post(route, content=raw, headers=headers)
    assert response.status_code == 422, response.text


@pytest.mark.parametrize(
    ("key", "status"),
    [("k" * 100, 202), ("k" * 101, 422), ("k" * 128, 422), ("", 422), ("has space", 422), ("tab\tkey", 422)],
)
def test_idempotency_keys_are_short_printable_ascii(
    key: str, status: int, queued_stack: Tenants, clients: Clients
) -> None:
    headers = Tenants.header(queued_stack.a) | {"Idempotency-Key": key}
    response = clients["compile"].post("/v1/probe", json={}, headers=headers)
    assert response.status_code == status, response.text
    if status == 422:
        assert "Idempotency-Key" in messages(response)


@pytest.mark.parametrize("job_id", ["a%00b", "%ED%A0%80", "x" * 65, "a.b"])
def test_malformed_ids_are_refused_before_any_query(job_id: str, queued_stack: Tenants, clients: Clients) -> None:
    response = clients["agent"].get(f"/v1/jobs/{job_id}", headers=Tenants.header(queued_stack.a))
    assert response.status_code == 422, response.text


def test_a_tenant_cannot_hold_a_worker_with_a_long_probe(queued_stack: Tenants, clients: Clients) -> None:
    headers = Tenants.header(queued_stack.a)
    response = clients["eval"].post("/v1/probe", json={"queue": "eval", "sleep_s": 600}, headers=headers)
    assert response.status_code == 403 and "service key" in response.json()["detail"]
    assert clients["eval"].post("/v1/probe", json={"queue": "eval", "sleep_s": 1}, headers=headers).status_code == 202
