"""The stored response mask: an optimize job records a multi-turn rollout with token ids, and what is read back
from the store masks out the prompt and the tool observations (0) and keeps the model's own tokens (1)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from cuda_agent.agent.jobs import load_token_sequence, load_trajectory
from cuda_agent.contracts.agent import RolloutConfig, RolloutRequest, TerminationReason
from cuda_agent.contracts.common import Device
from cuda_agent.contracts.jobs import OptimizeResult
from cuda_agent.db import session_scope
from cuda_agent.db.models import Trajectory as TrajectoryRow
from cuda_agent.jobs import run_to_result
from cuda_agent.jobs.registry import OPTIMIZE_JOB
from cuda_agent.settings import get_settings
from tests.agent.agent_fixtures import PROBLEM
from tests.agent.test_loop import EDIT_SCRIPT
from tests.fakes.openai_server import FakeOpenAIServer, render_message

Start = Callable[..., FakeOpenAIServer]


def optimize(start: Start, monkeypatch: pytest.MonkeyPatch, **options: Any) -> OptimizeResult:
    """Run an optimize job (embedded: in this process) whose policy follows EDIT_SCRIPT on a fake server."""
    server = start(EDIT_SCRIPT)
    endpoints = {"fake": {"base_url": server.base_url, "model": "fake-model", "api_key": "k"}}
    monkeypatch.setenv("CUDA_AGENT_LLM_ENDPOINTS", json.dumps(endpoints))
    get_settings.cache_clear()
    request = RolloutRequest(
        problem_source=PROBLEM,
        policy_options={"endpoint": "fake", **options},
        config=RolloutConfig(device=Device.CPU, max_turns=6),
    )
    return run_to_result(OPTIMIZE_JOB, request, tenant="tenant-a")


def test_stored_trajectory_masks_prompt_and_observations(
    fake_openai: Start, embedded_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = optimize(fake_openai, monkeypatch, return_token_ids=True)
    assert result.termination is TerminationReason.FINISHED and result.turns == len(EDIT_SCRIPT) >= 3

    trajectory = load_trajectory(result.trajectory_id, tenant="tenant-a")
    stored = load_token_sequence(result.trajectory_id, tenant="tenant-a")
    assert trajectory is not None and stored is not None
    assert stored == trajectory.token_sequence()  # the rows hold exactly the sequence that was scored
    assert len(stored.response_ids) == len(stored.response_mask) == len(stored.response_logprobs)
    # The prompt (system and task) is not part of the response at all.
    assert bytes(stored.prompt_ids).decode() == "".join(render_message(m) for m in trajectory.prompt)

    model = bytes(t for t, m in zip(stored.response_ids, stored.response_mask, strict=True) if m == 1).decode()
    masked = bytes(t for t, m in zip(stored.response_ids, stored.response_mask, strict=True) if m == 0).decode()
    assert model == "".join(render_message(turn.assistant.to_message()) for turn in trajectory.turns)
    observations = [obs for turn in trajectory.turns[:-1] for obs in turn.observations]
    assert masked == "".join(render_message({"role": "tool", "content": obs.content}) for obs in observations)
    assert "applied 1 edit(s) to notes.txt" in masked and "applied 1 edit(s)" not in model
    # The logprobs of observation tokens are placeholders; the model's are the server's.
    assert all(lp == 0.0 for lp, m in zip(stored.response_logprobs, stored.response_mask, strict=True) if m == 0)

    # Turn by turn: the tool results that opened the turn (0), then the model's completion (1).
    with session_scope() as session:
        row = session.get(TrajectoryRow, result.trajectory_id)
        assert row is not None
        for turn_row, turn in zip(row.turns, trajectory.turns, strict=True):
            completion = turn.assistant.token_ids or []
            opening = len(turn_row.response_mask) - len(completion)
            assert turn_row.response_mask == [0] * opening + [1] * len(completion)
            assert turn_row.token_ids[opening:] == completion
            assert (opening > 0) == (turn.index > 0)

    assert load_token_sequence(result.trajectory_id, tenant="tenant-b") is None  # another tenant's


def test_no_sequence_is_stored_without_token_ids(
    fake_openai: Start, embedded_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = optimize(fake_openai, monkeypatch)
    assert load_token_sequence(result.trajectory_id) is None
