"""On the GPU: a replayed trajectory, posted to the real agent service, produces a verified CUDA kernel that is
faster than eager PyTorch. The rollout's compile and verify calls run as jobs through the compile and eval
libraries (embedded: the GPU host has no Postgres or Redis, so jobs run in-process on SQLite)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cuda_agent.contracts.agent import AssistantTurn, ToolCall, Trajectory, TurnRecord
from cuda_agent.db import upgrade_database

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "candidates" / "relu_add_cuda"


def recorded_trajectory() -> Trajectory:
    files = {p.relative_to(EXAMPLE).as_posix(): p.read_text() for p in EXAMPLE.rglob("*") if p.is_file()}
    actions = [
        [
            ToolCall(id=f"w{i}", name="write_file", arguments=json.dumps({"path": k, "content": v}))
            for i, (k, v) in enumerate(sorted(files.items()))
        ],
        [ToolCall(id="c", name="compile", arguments="{}")],
        [ToolCall(id="v", name="verify", arguments="{}")],
        [ToolCall(id="f", name="finish", arguments=json.dumps({"summary": "fused relu + bias add"}))],
    ]
    return Trajectory(
        id="recorded",
        policy="recorded",
        config={},
        prompt=[],
        turns=[TurnRecord(index=i, assistant=AssistantTurn(tool_calls=calls)) for i, calls in enumerate(actions)],
    )


@pytest.mark.gpu
@pytest.mark.sandbox
def test_replayed_trajectory_gives_a_faster_cuda_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_AGENT_AUTH_REQUIRED", "false")
    from cuda_agent.settings import get_settings

    get_settings.cache_clear()
    upgrade_database()
    from services.agent_svc.api import app

    body = {
        # Large enough that the fused kernel's saved memory traffic outweighs the launcher's per-call overhead.
        "problem_source": (ROOT / "examples" / "problems" / "relu_add.py")
        .read_text()
        .replace("batch = 64", "batch = 16384")
        .replace("size = 1024", "size = 4096"),
        "policy": "replay",
        "policy_options": {"trajectory": recorded_trajectory().model_dump(mode="json")},
        "config": {"device": "cuda", "max_turns": 10},
    }
    with TestClient(app) as client:
        accepted = client.post("/v1/optimize", json=body)
        assert accepted.status_code in (200, 202), accepted.text
        job = client.get(f"/v1/jobs/{accepted.json()['id']}").json()
    assert job["status"] == "succeeded", job
    best = job["result"]["best"]
    assert best is not None, job["result"]
    verdict = best["result"]
    assert verdict["status"] == "correct", verdict["message"]
    assert verdict["reward"] >= 2 and verdict["speedup_vs_eager"] > 1.05, verdict
