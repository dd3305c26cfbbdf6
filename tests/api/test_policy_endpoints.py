"""LLM endpoints are the operator's: a request names a configured endpoint and never carries a URL or a key, and
the operator's key goes to the configured URL only (regression of issue 11: credential theft and SSRF)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cuda_agent.agent.policies import PolicyError, create_policy, openai_policy
from cuda_agent.agent.policies.openai_policy import use_local_endpoint
from cuda_agent.contracts.agent import RolloutRequest
from cuda_agent.settings import ConfigError, get_settings
from tests.agent.agent_fixtures import PROBLEM
from tests.api.conftest import Clients, Tenants

OPERATOR_KEY = "sk-operator-secret"


class KeyCatcher:
    """An HTTP server that records the Authorization header of each request and answers 400."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []
        catcher = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                catcher.seen.append(self.headers.get("Authorization"))
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.dumps({"error": {"message": "no"}}).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def catchers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[KeyCatcher, KeyCatcher]]:
    """The operator's endpoint 'team' (models m1, m2) and an attacker's server; the default endpoint's key set."""
    operator, attacker = KeyCatcher(), KeyCatcher()
    endpoints = {"team": {"base_url": operator.url, "model": "m1", "models": ["m2"], "api_key": OPERATOR_KEY}}
    monkeypatch.setenv("CUDA_AGENT_LLM_ENDPOINTS", json.dumps(endpoints))
    monkeypatch.setenv("CUDA_AGENT_OPENAI_API_KEY", OPERATOR_KEY)
    monkeypatch.setenv("CUDA_AGENT_OPENAI_MODEL", "m0")
    get_settings.cache_clear()
    yield operator, attacker
    for catcher in (operator, attacker):
        catcher.httpd.shutdown()
        catcher.httpd.server_close()


def act(**options: object) -> None:
    policy = create_policy("openai", max_retries=0, **options)
    with pytest.raises(PolicyError):
        policy.act([{"role": "user", "content": "hi"}], [])


@pytest.mark.integration
@pytest.mark.parametrize(
    ("policy", "options", "says"),
    [
        ("openai", {"base_url": "http://attacker.example/v1"}, "base_url is operator configuration"),
        ("openai", {"endpoint": "team", "api_key": "mine"}, "api_key is operator configuration"),
        ("heuristic", {"base_url": "http://attacker.example/v1"}, "base_url is operator configuration"),
        ("openai", {"extra_body": {"n": 100}}, "extra_body: Extra inputs are not permitted"),
        ("openai", {"endpoint": "elsewhere"}, "no LLM endpoint named 'elsewhere'; configured: default, team"),
        ("openai", {"endpoint": "team", "model": "gpt-huge"}, "does not offer model 'gpt-huge'; it offers: m1, m2"),
    ],
)
def test_requests_choose_among_the_operators_endpoints(
    policy: str, options: dict, says: str, catchers: tuple[KeyCatcher, KeyCatcher], tenants: Tenants, clients: Clients
) -> None:
    body = {"problem_source": PROBLEM, "policy": policy, "policy_options": options}
    response = clients["agent"].post("/v1/optimize", json=body, headers=Tenants.header(tenants.a))
    assert response.status_code == 422 and says in response.text, response.text
    assert OPERATOR_KEY not in response.text


def test_the_operators_key_goes_to_the_configured_endpoint_only(catchers: tuple[KeyCatcher, KeyCatcher]) -> None:
    operator, attacker = catchers
    for options in ({"endpoint": "team"}, {"endpoint": "team", "model": "m2"}):
        request = RolloutRequest(problem_source=PROBLEM, policy_options=options)
        act(**request.policy_options)
    assert operator.seen == [f"Bearer {OPERATOR_KEY}"] * 2
    # A URL given directly (operator code only) is sent no configured key.
    act(base_url=attacker.url, model="m")
    assert attacker.seen == ["Bearer EMPTY"]


def test_a_command_line_url_serves_only_jobs_in_this_process(
    catchers: tuple[KeyCatcher, KeyCatcher], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, local = catchers
    monkeypatch.setattr(openai_policy, "_local_endpoints", {})  # this process's declarations end with the test
    name = use_local_endpoint(local.url, model="m")
    act(endpoint=name)
    assert local.seen == ["Bearer EMPTY"]
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/11")
    get_settings.cache_clear()
    with pytest.raises(ConfigError, match="configure it there"):
        use_local_endpoint(local.url, model="m")


@pytest.mark.integration
def test_a_request_naming_no_policy_is_checked_as_the_kernel_authors_where_no_endpoint_has_a_model(
    tenants: Tenants, clients: Clients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API resolves the policy before it queues the job: with no LLM model configured, the options are the
    kernel author's (an accepted job would run it; the resolution itself is test_the_default_policy_...)."""
    monkeypatch.delenv("CUDA_AGENT_OPENAI_MODEL", raising=False)
    monkeypatch.delenv("CUDA_AGENT_LLM_ENDPOINTS", raising=False)
    get_settings.cache_clear()
    body = {"problem_source": PROBLEM, "config": {"device": "cpu"}, "policy_options": {"temperature": 0.5}}
    refused = clients["agent"].post("/v1/optimize", json=body, headers=Tenants.header(tenants.a))
    assert refused.status_code == 422 and "the heuristic policy takes: budget_s" in refused.text, refused.text


def test_the_default_policy_is_the_llm_where_an_endpoint_has_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from cuda_agent.agent.policies import default_policy, policy_for, with_policy

    monkeypatch.delenv("CUDA_AGENT_OPENAI_MODEL", raising=False)
    get_settings.cache_clear()
    assert default_policy() == "heuristic"
    # A command line's URL or a request's endpoint asks for the LLM policy, configured default or not.
    assert policy_for(None, {"base_url": "http://127.0.0.1:8100/v1"}) == policy_for(None, {"endpoint": "t"}) == "openai"
    monkeypatch.setenv("CUDA_AGENT_OPENAI_MODEL", "m0")
    get_settings.cache_clear()
    assert default_policy() == "openai"
    assert with_policy(RolloutRequest(problem_source=PROBLEM)).policy == "openai"
    assert with_policy(RolloutRequest(problem_source=PROBLEM, policy="replay")).policy == "replay"
