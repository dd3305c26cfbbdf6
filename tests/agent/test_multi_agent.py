"""Multi-agent mode: specialist roles take turns over one workspace; only the coordinator may finish."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cuda_agent.agent import run_rollout
from cuda_agent.agent.multi_agent import MultiAgentPolicy, default_roles
from cuda_agent.contracts.agent import TerminationReason
from tests.agent.agent_fixtures import make_env, make_policy
from tests.fakes.openai_server import FakeOpenAIServer, reply, tool


def test_roles_take_turns_and_coordinator_finishes(fake_openai: Callable[..., FakeOpenAIServer]) -> None:
    script = [
        reply(tool("write_file", path="kernels/k.cu", content="// v1\n")),
        reply(tool("edit_file", path="kernels/k.cu", edits=[{"old_string": "v1", "new_string": "v2 coalesced"}])),
        reply(tool("grep", pattern="coalesced")),
        reply(tool("read_file", path="kernels/k.cu")),
        reply(tool("finish", summary="all roles done")),
    ]
    server = fake_openai(script)
    policy = MultiAgentPolicy(default_roles(make_policy(server)), turns_per_role=1)
    traj = run_rollout(make_env(), policy)
    assert traj.termination is TerminationReason.FINISHED
    assert [t.assistant.agent_role for t in traj.turns] == [
        "coordinator", "memory_layout", "instruction_parallelism", "boundary_conditions", "coordinator",
    ]  # fmt: skip
    assert "v2 coalesced" in traj.turns[3].observations[0].content  # specialists share the workspace
    for request, role in zip(server.requests, ["coordinator", "memory_layout"], strict=False):
        offered = {t["function"]["name"] for t in request["tools"]}
        assert request["messages"][-1]["content"].startswith(f"[{role}]")
        assert ("finish" in offered) == (role == "coordinator")


def test_multi_agent_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError, match="at least one role"):
        MultiAgentPolicy([])
