"""The rollout loop against a real HTTP chat-completions server: limits, failures, tokens, replay."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from cuda_agent.agent import (
    ReplayPolicy,
    RolloutRunner,
    create_policy,
    read_jsonl,
    run_request,
    run_rollout,
    write_jsonl,
    write_parquet,
)
from cuda_agent.agent.context import estimate_tokens, fit_context
from cuda_agent.agent.policies import register_policy
from cuda_agent.agent.trajectory import parquet_available
from cuda_agent.contracts.agent import RolloutConfig, RolloutProgress, RolloutRequest, TerminationReason
from cuda_agent.contracts.common import Device
from cuda_agent.settings import get_settings
from tests.agent.agent_fixtures import PROBLEM, make_env, make_policy
from tests.fakes.openai_server import FakeError, FakeOpenAIServer, reply, tool

Start = Callable[..., FakeOpenAIServer]

EDIT_SCRIPT = [
    reply("Plan first.", tool("todo_write", todos=[{"content": "write notes", "status": "in_progress"}])),
    reply(tool("write_file", path="notes.txt", content="alpha\nbeta\n"), tool("read_file", path="notes.txt")),
    reply(tool("edit_file", path="notes.txt", edits=[{"old_string": "beta", "new_string": "gamma"}])),
    reply(tool("finish", summary="done")),
]


def test_multi_turn_rollout_finishes(fake_openai: Start) -> None:
    server = fake_openai(EDIT_SCRIPT)
    progress: list[RolloutProgress] = []
    env = make_env(keep_workspace=False)
    env.keep_workspace = True
    traj = run_rollout(env, make_policy(server), progress=progress.append)
    assert traj.termination is TerminationReason.FINISHED and traj.termination_detail == "done"
    assert len(traj.turns) == 4 and [p.turn for p in progress] == [0, 1, 2, 3]
    assert env.workspace.read_text("notes.txt") == "alpha\ngamma\n"
    assert "     2\tbeta" in traj.turns[1].observations[1].content
    assert all(o.ok for t in traj.turns for o in t.observations)
    # The server saw the whole conversation: tools offered, tool results returned under their call ids.
    last = server.requests[-1]
    assert {t["function"]["name"] for t in last["tools"]} >= {"bash", "compile", "verify", "finish"}
    tool_msgs = [m for m in last["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_0_0", "call_1_0", "call_1_1", "call_2_0"]
    assert traj.messages()[: len(last["messages"])] == last["messages"]
    assert traj.best is None


def test_looping_policy_stops_at_max_turns(fake_openai: Start) -> None:
    server = fake_openai([], then=reply(tool("read_file", path="model.py")))
    traj = run_rollout(make_env(max_turns=5), make_policy(server))
    assert traj.termination is TerminationReason.MAX_TURNS
    assert traj.termination_detail == "turn limit of 5 reached"
    assert len(traj.turns) == 5 and len(server.requests) == 5


def test_unknown_tools_and_malformed_arguments_do_not_crash(fake_openai: Start) -> None:
    script = [
        reply(tool("launch_rockets", count=3)),
        reply(tool("write_file", '{"path": "a.txt", "content": "unterminated')),
        reply(tool("read_file", "null")),
        reply("I think I am done but I will not call finish."),
    ]
    server = fake_openai(script, then=reply("still talking"))
    traj = run_rollout(make_env(max_turns=6), make_policy(server))
    assert traj.termination is TerminationReason.MAX_TURNS
    obs = [t.observations for t in traj.turns]
    assert "unknown tool 'launch_rockets'" in obs[0][0].content and not obs[0][0].ok
    assert "not valid JSON" in obs[1][0].content
    assert "JSON object" in obs[2][0].content
    assert obs[3] == []
    # A reply without tool calls gets a nudge as a user message, so the model is told what to do.
    assert server.requests[4]["messages"][-1] == {
        "role": "user",
        "content": server.requests[4]["messages"][-1]["content"],
    }
    assert "No tool was called" in server.requests[4]["messages"][-1]["content"]


def test_client_error_is_policy_error(fake_openai: Start) -> None:
    server = fake_openai([FakeError(400, "bad request: unknown field")])
    traj = run_rollout(make_env(), make_policy(server))
    assert traj.termination is TerminationReason.POLICY_ERROR
    assert "BadRequestError 400" in traj.termination_detail and len(server.requests) == 1


def test_transient_errors_are_retried(fake_openai: Start) -> None:
    server = fake_openai([FakeError(503), FakeError(429), reply(tool("finish"))])
    traj = run_rollout(make_env(), make_policy(server))
    assert traj.termination is TerminationReason.FINISHED and len(server.requests) == 3


def test_retries_are_bounded(fake_openai: Start) -> None:
    server = fake_openai([], then=FakeError(500))
    traj = run_rollout(make_env(), make_policy(server, max_retries=2))
    assert traj.termination is TerminationReason.POLICY_ERROR
    assert "after 3 attempts" in traj.termination_detail and len(server.requests) == 3


def test_unreachable_endpoint_is_policy_error() -> None:
    policy = create_policy(
        "openai", base_url="http://127.0.0.1:9/v1", model="m", api_key="k", max_retries=1, backoff_s=0.01
    )
    traj = run_rollout(make_env(), policy)
    assert traj.termination is TerminationReason.POLICY_ERROR and "APIConnectionError" in traj.termination_detail


def test_cancellation(fake_openai: Start) -> None:
    server = fake_openai([], then=reply(tool("glob", pattern="*")))
    calls = {"n": 0}

    def cancel() -> bool:
        calls["n"] += 1
        return calls["n"] > 2

    traj = run_rollout(make_env(), make_policy(server), cancel=cancel)
    assert traj.termination is TerminationReason.CANCELLED and len(traj.turns) == 2


def test_wall_clock_limit(fake_openai: Start) -> None:
    server = fake_openai([], then=reply(tool("glob", pattern="*"), delay_s=0.2))
    traj = run_rollout(make_env(wall_clock_s=0.5), make_policy(server))
    assert traj.termination is TerminationReason.WALL_CLOCK
    assert 2 <= len(traj.turns) <= 4


def test_context_exhausted(fake_openai: Start) -> None:
    env = make_env(context_tokens=8000, response_reserve_tokens=0)
    server = fake_openai([reply(tool("write_file", path="big.txt", content="y" * 100_000))])
    traj = run_rollout(env, make_policy(server))
    assert traj.termination is TerminationReason.CONTEXT_EXHAUSTED
    assert "8000-token budget" in traj.termination_detail
    # The first turn alone no longer fits: the loop stops instead of sending a prompt the server would reject.
    assert len(traj.turns) == 1 and len(server.requests) == 1


def test_context_truncation_keeps_head_and_recent_turns(fake_openai: Start) -> None:
    # The fake counts bytes as tokens: each read adds ~3000, so a 20000-token budget keeps only the latest turns.
    script = [reply(tool("write_file", path="mid.txt", content="z" * 3000))]
    server = fake_openai(script, then=reply(tool("read_file", path="mid.txt")))
    traj = run_rollout(make_env(context_tokens=20_000, response_reserve_tokens=0, max_turns=12), make_policy(server))
    assert traj.termination is TerminationReason.MAX_TURNS
    assert traj.turns[-1].truncated_turns > 0
    last_prompt = server.requests[-1]["messages"]
    assert last_prompt[:2] == traj.prompt
    assert "earlier turn(s) were removed" in last_prompt[2]["content"]
    assert last_prompt[-1]["tool_call_id"] == f"call_{len(traj.turns) - 2}_0"
    # The server counts bytes, 4x the chars/4 estimate; the loop calibrates from usage and stays in budget.
    assert all(r["messages"] for r in server.requests)
    assert max(len(str(r["messages"])) for r in server.requests[3:]) < 20_000 * 1.3


def test_fit_context_drops_whole_turns_oldest_first() -> None:
    head = [{"role": "system", "content": "s" * 40}, {"role": "user", "content": "u" * 40}]
    turns = [[{"role": "assistant", "content": str(i) * 400}, {"role": "tool", "content": "t" * 400}] for i in range(5)]
    fitted = fit_context(head, turns, budget=estimate_tokens(head) + 2 * estimate_tokens(turns[0]) + 60)
    assert fitted is not None
    messages, dropped, _ = fitted
    assert dropped == 3 and messages[:2] == head and messages[3:] == turns[3] + turns[4]
    assert fit_context(head, turns, budget=estimate_tokens(head)) is None


def test_token_ids_logprobs_and_mask(fake_openai: Start) -> None:
    server = fake_openai(EDIT_SCRIPT)
    traj = run_rollout(make_env(), make_policy(server, return_token_ids=True))
    assert traj.termination is TerminationReason.FINISHED
    first = traj.turns[0].assistant
    assert first.token_ids and first.logprobs and len(first.token_ids) == len(first.logprobs)
    assert first.usage is not None and first.usage.prompt_tokens == len(first.prompt_token_ids or [])
    seq = traj.token_sequence()
    assert seq is not None
    assert seq.prompt_ids == first.prompt_token_ids
    assert len(seq.response_ids) == len(seq.response_mask) == len(seq.response_logprobs)
    model_tokens = [t for t, m in zip(seq.response_ids, seq.response_mask, strict=True) if m == 1]
    assert model_tokens == [t for turn in traj.turns for t in turn.assistant.token_ids or []]
    # Tool observations are in the sequence with mask 0.
    tool_text = bytes(t for t, m in zip(seq.response_ids, seq.response_mask, strict=True) if m == 0).decode()
    assert "applied 1 edit(s) to notes.txt" in tool_text


def test_token_ids_absent_is_graceful(fake_openai: Start) -> None:
    server = fake_openai(EDIT_SCRIPT)
    traj = run_rollout(make_env(), make_policy(server, logprobs=False))
    assert traj.termination is TerminationReason.FINISHED
    assert traj.turns[0].assistant.token_ids is None and traj.turns[0].assistant.logprobs is None
    assert traj.token_sequence() is None


def test_jsonl_roundtrip_and_replay_reproduces(fake_openai: Start, tmp_path: Path) -> None:
    server = fake_openai(EDIT_SCRIPT)
    original = run_rollout(make_env(), make_policy(server, return_token_ids=True))
    path = tmp_path / "traj.jsonl"
    assert write_jsonl([original], path) == 1
    (loaded,) = list(read_jsonl(path))
    assert loaded == original

    replayed = run_rollout(make_env(), create_policy("replay", trajectory=loaded))
    assert replayed.termination is original.termination
    assert [t.assistant for t in replayed.turns] == [t.assistant for t in original.turns]
    assert [[(o.name, o.ok, o.content) for o in t.observations] for t in replayed.turns] == [
        [(o.name, o.ok, o.content) for o in t.observations] for t in original.turns
    ]


def test_replay_exhausted_is_policy_error(fake_openai: Start) -> None:
    server = fake_openai([reply(tool("glob", pattern="*"))], then=FakeError(400))
    recorded = run_rollout(make_env(), make_policy(server))
    traj = run_rollout(make_env(), ReplayPolicy(trajectory=recorded))
    assert traj.termination is TerminationReason.POLICY_ERROR and "replay exhausted" in traj.termination_detail


def test_policy_registry() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_policy("openai", ReplayPolicy)
    with pytest.raises(KeyError, match="unknown policy 'nope'"):
        create_policy("nope")


def test_runner_states_are_explicit(fake_openai: Start) -> None:
    server = fake_openai([reply(tool("finish"))])
    runner = RolloutRunner(make_env(), make_policy(server))
    assert runner.s.state.value == "pending"
    traj = runner.run()
    runner.env.close()
    assert runner.s.state.value == "terminated" and traj.termination is TerminationReason.FINISHED


def test_run_request_builds_policy_by_name(fake_openai: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    server = fake_openai([reply(tool("finish", summary="ok"))])
    # The operator configures endpoints; a request names one.
    endpoints = {"fake": {"base_url": server.base_url, "model": "fake-model", "api_key": "k"}}
    monkeypatch.setenv("CUDA_AGENT_LLM_ENDPOINTS", json.dumps(endpoints))
    get_settings.cache_clear()
    request = RolloutRequest(
        problem_source=PROBLEM,
        problem_id="p1",
        policy_options={"endpoint": "fake"},
        config=RolloutConfig(device=Device.CPU, max_turns=3),
    )
    traj = run_request(request)
    assert traj.termination is TerminationReason.FINISHED and traj.problem_id == "p1" and traj.model == "fake-model"


def test_parquet_export(fake_openai: Start, tmp_path: Path) -> None:
    server = fake_openai(EDIT_SCRIPT)
    traj = run_rollout(make_env(), make_policy(server, return_token_ids=True))
    path = tmp_path / "traj.parquet"
    if not parquet_available():
        with pytest.raises(RuntimeError, match="needs pyarrow"):
            write_parquet([traj], path)
        return
    import pyarrow.parquet as pq

    assert write_parquet([traj], path) == 1
    row = pq.read_table(path).to_pylist()[0]
    assert row["termination"] == "finished" and row["response_mask"] == traj.token_sequence().response_mask  # type: ignore[union-attr]
