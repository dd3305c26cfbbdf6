"""The `multi` policy end to end: `cuda-agent optimize --policy multi` against the fake OpenAI server, on cpu.

The coordinator writes a correct OpenMP kernel, the specialists compile, verify and read it in turn, and the
coordinator finishes: the trajectory carries each role's turns and the verified candidate is written out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuda_agent.agent.multi_agent import MultiAgentPolicy
from cuda_agent.agent.policies import create_policy
from cuda_agent.contracts.agent import RolloutRequest
from tests.agent.agent_fixtures import PROBLEM
from tests.agent.test_rollout_e2e import FIX, KERNEL, MODEL_NEW
from tests.conftest import cli
from tests.fakes.openai_server import FakeOpenAIServer, reply, tool

ROLES = ["coordinator", "memory_layout", "instruction_parallelism", "boundary_conditions", "coordinator"]
SCRIPT = [
    reply(
        tool("write_file", path="kernels/add.cpp", content=KERNEL.replace(FIX["old_string"], FIX["new_string"])),
        tool("write_file", path="model_new.py", content=MODEL_NEW),
    ),
    reply(tool("compile")),
    reply(tool("verify")),
    reply(tool("read_file", path="kernels/add.cpp")),
    reply(tool("finish", summary="verified OpenMP add")),
]


@pytest.mark.sandbox
@pytest.mark.slow  # the whole optimize command, about a minute
def test_optimize_cli_with_the_multi_policy(tmp_path: Path) -> None:
    problem, out = tmp_path / "problem.py", tmp_path / "out"
    problem.write_text(PROBLEM)
    with FakeOpenAIServer(SCRIPT) as server:
        result = cli(
            *("optimize", str(problem), "--policy", "multi", "--device", "cpu", "--max-turns", "8"),
            *("--policy-option", f"base_url={server.base_url}", "--policy-option", "model=fake-model"),
            *("--policy-option", "turns_per_role=1", "--out", str(out)),
            env={"CUDA_AGENT_DATA_DIR": str(tmp_path / "data")},
            timeout=600,
        )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "finished after 5 turns; best: correct" in result.stdout

    trajectory = json.loads((out / "trajectory.jsonl").read_text().splitlines()[0])
    assert trajectory["policy"] == "multi"
    assert [t["assistant"]["agent_role"] for t in trajectory["turns"]] == ROLES
    assert trajectory["best"]["turn"] == 2  # the instruction_parallelism specialist's verify
    assert trajectory["best"]["result"]["status"] == "correct"
    assert (out / "model_new.py").read_text() == MODEL_NEW

    # Each role got its brief last, and only the coordinator was offered `finish`.
    for request, role in zip(server.requests, ROLES, strict=True):
        assert request["messages"][-1]["content"].startswith(f"[{role}]")
        offered = {t["function"]["name"] for t in request["tools"]}
        assert ("finish" in offered) == (role == "coordinator")


def test_multi_policy_options_are_the_openai_ones_plus_turns_per_role() -> None:
    request = RolloutRequest(problem_source=PROBLEM, policy="multi", policy_options={"turns_per_role": "2"})
    assert request.policy_options == {"turns_per_role": 2}
    with pytest.raises(ValueError, match="base_url is operator configuration"):
        RolloutRequest(problem_source=PROBLEM, policy="multi", policy_options={"base_url": "http://attacker/v1"})
    with pytest.raises(ValueError, match="turns_per_role: Input should be greater than or equal to 1"):
        RolloutRequest(problem_source=PROBLEM, policy="multi", policy_options={"turns_per_role": 0})

    policy = create_policy("multi", base_url="http://127.0.0.1:9/v1", model="m", turns_per_role=3)
    assert isinstance(policy, MultiAgentPolicy) and policy.turns_per_role == 3 and policy.model == "m"
    assert [r.name for r in policy.roles] == ROLES[:4]
    assert {id(r.policy) for r in policy.roles} == {id(policy.roles[0].policy)}  # one endpoint serves every role
