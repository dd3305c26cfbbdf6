"""A rollout recorded in the workdir form (the policy writes kernels, bindings and model_new.py in that layout)
re-exports unchanged: the stored trajectory survives JSONL export and import, and the trainer's sequence built
from the re-imported one is the same as from the stored one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from cuda_agent.agent.jobs import load_token_sequence, load_trajectory
from cuda_agent.agent.trajectory import read_jsonl, write_jsonl
from cuda_agent.contracts.agent import RolloutConfig, RolloutRequest, TerminationReason
from cuda_agent.contracts.candidate import CandidateForm
from cuda_agent.jobs import run_to_result
from cuda_agent.jobs.registry import OPTIMIZE_JOB
from cuda_agent.settings import get_settings
from cuda_agent.train.data import to_training_sequence
from tests.agent.conftest import fake_openai  # noqa: F401  (the fixture)
from tests.fakes.openai_server import FakeOpenAIServer, reply, tool
from tests.workdir.conftest import WORKSPACES, problem

Start = Callable[..., FakeOpenAIServer]


def workdir_script() -> list[object]:
    files = ["model_new.py", "kernels/silu.cu", "kernels/silu_binding.cpp"]
    writes = [tool("write_file", path=f, content=(WORKSPACES / "elementwise" / f).read_text()) for f in files]
    return [
        reply("Read the layout.", tool("read_file", path="binding_registry.h")),
        reply(*writes),
        reply(tool("finish", summary="wrote the SiLU kernel and its binding")),
    ]


def test_workdir_trajectory_reexports_unchanged(
    fake_openai: Start,  # noqa: F811
    embedded_db: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    server = fake_openai(workdir_script())
    endpoints = {"fake": {"base_url": server.base_url, "model": "fake-model", "api_key": "k"}}
    monkeypatch.setenv("CUDA_AGENT_LLM_ENDPOINTS", json.dumps(endpoints))
    get_settings.cache_clear()
    request = RolloutRequest(
        problem_source=problem("elementwise"),
        policy_options={"endpoint": "fake", "return_token_ids": True},
        config=RolloutConfig(form=CandidateForm.WORKDIR, max_turns=5),
    )
    result = run_to_result(OPTIMIZE_JOB, request, tenant="tenant-a")
    assert result.termination is TerminationReason.FINISHED

    stored = load_trajectory(result.trajectory_id, tenant="tenant-a")
    tokens = load_token_sequence(result.trajectory_id, tenant="tenant-a")
    assert stored is not None and tokens is not None
    assert stored.config.form is CandidateForm.WORKDIR
    # The policy saw the workdir skill and read the platform's registry header from its workspace.
    assert "REGISTER_BINDING" in stored.prompt[1]["content"]
    assert "class __attribute__" in stored.turns[0].observations[0].content

    path = tmp_path / "trajectories.jsonl"
    assert write_jsonl([stored], path) == 1
    [reread] = list(read_jsonl(path))
    assert reread == stored and reread.model_dump_json() == stored.model_dump_json()
    assert reread.token_sequence() == tokens
    original = to_training_sequence(stored, tokens, "fake-model", vocab_size=256)
    again = to_training_sequence(reread, reread.token_sequence(), "fake-model", vocab_size=256)
    assert again == original and sum(again.action_mask) > 0
