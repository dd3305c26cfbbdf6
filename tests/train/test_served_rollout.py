"""A full rollout of the agent against a checkpoint served by `cuda-agent serve-policy` (issue 16): the `openai`
policy talks to the server over HTTP, the checkpoint's replies are tool calls that write the kernel author's
candidate, verify it through the real compile and eval libraries and finish, and the rollout ends with a verdict.

The checkpoint is scripted (tests/train/scripted.py): what is under test is serving, the policy's client, the tools
and the evaluation, not what a model has learned."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.agent import OpenAIPolicy, run_rollout
from cuda_agent.author.search import author_problem
from cuda_agent.contracts.agent import TerminationReason
from cuda_agent.contracts.common import Device
from tests.agent.agent_fixtures import PROBLEM, make_env
from tests.train.scripted import call_word, scripted_model, serving


def served_rollout(device: Device, tmp_path: Path) -> None:
    authored = author_problem(PROBLEM, device.value)
    assert authored.variants, authored.unsupported
    _, files = authored.variants[0]
    calls = [call_word("write_file", path=path, content=text) for path, text in sorted(files.items())]
    calls += [call_word("verify"), call_word("finish", summary="the author's first variant")]
    folder = scripted_model(tmp_path / "policy", calls)
    with serving(folder, device=device.value) as base_url:
        policy = OpenAIPolicy(base_url=base_url, model="tiny", temperature=0.0, return_token_ids=True, max_retries=0)
        traj = run_rollout(make_env(device=device), policy)
    assert traj.termination is TerminationReason.FINISHED, traj.termination_detail
    first = traj.turns[0]
    assert [c.name for c in first.assistant.tool_calls] == [*["write_file"] * len(files), "verify", "finish"]
    # The reply is the served checkpoint's own: one token per call, then </s>, each with its logprob.
    assert first.assistant.token_ids is not None and len(first.assistant.token_ids) == len(calls) + 1
    assert first.assistant.logprobs is not None and len(first.assistant.logprobs) == len(calls) + 1
    verdict = next(o.content for o in first.observations if o.content.startswith("verify:"))
    assert verdict.startswith("verify: correct"), verdict
    assert traj.best is not None and traj.best.result.correct and traj.best.result.reward is not None


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_served_checkpoint_completes_a_rollout_on_cpu(tmp_path: Path) -> None:
    served_rollout(Device.CPU, tmp_path)


@pytest.mark.gpu
def test_a_served_checkpoint_completes_a_rollout_on_cuda(tmp_path: Path) -> None:
    served_rollout(Device.CUDA, tmp_path)
