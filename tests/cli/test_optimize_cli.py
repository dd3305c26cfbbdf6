"""`cuda-agent optimize` on the embedded default (SQLite, no Redis): the same scripted rollout as the services test,
through the real CLI in a child process, writing model_new.py, kernels/, report.json and trajectory.jsonl."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from tests.agent.agent_fixtures import PROBLEM
from tests.agent.test_rollout_e2e import MODEL_NEW, SCRIPT
from tests.conftest import cli
from tests.fakes.openai_server import FakeOpenAIServer, reply, tool

pytestmark = pytest.mark.sandbox


def optimize_with(server: FakeOpenAIServer, tmp_path: Path, max_turns: int) -> CompletedProcess[str]:
    """`cuda-agent optimize` of the test problem, driven by ``server``, on the data dir tmp_path/data."""
    problem = tmp_path / "problem.py"
    problem.write_text(PROBLEM)
    return cli(
        *("optimize", str(problem), "--policy", "openai", "--device", "cpu", "--max-turns", str(max_turns)),
        *("--policy-option", f"base_url={server.base_url}", "--policy-option", "model=fake-model"),
        *("--out", str(tmp_path / "out")),
        env={"CUDA_AGENT_DATA_DIR": str(tmp_path / "data")},
        timeout=600,
    )


@pytest.mark.slow
def test_optimize_cli_embedded(tmp_path: Path) -> None:
    out, data = tmp_path / "out", tmp_path / "data"
    with FakeOpenAIServer(SCRIPT) as server:
        result = optimize_with(server, tmp_path, max_turns=12)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "finished after 7 turns; best: correct" in result.stdout
    assert (out / "model_new.py").read_text() == MODEL_NEW
    assert "a[i] + b[i];" in (out / "kernels" / "add.cpp").read_text()
    report = json.loads((out / "report.json").read_text())
    assert report["best"]["result"]["reward"] >= 1
    trajectory = json.loads((out / "trajectory.jsonl").read_text().splitlines()[0])
    assert len(trajectory["turns"]) == 7

    db = sqlite3.connect(data / "cuda-agent.db")
    kinds = dict(db.execute("SELECT kind, count(*) FROM jobs GROUP BY kind").fetchall())
    # The rollout's two verify calls, then the returned kernel judged once more (the job's confirmation).
    assert kinds["optimize"] == 1 and kinds["compile"] >= 2 and kinds["evaluate"] == 3
    assert report["confirmation"]["correct"] is True
    assert db.execute("SELECT count(*) FROM turns").fetchone()[0] == 7
    assert db.execute("SELECT status FROM jobs WHERE kind = 'optimize'").fetchone()[0] == "succeeded"


def test_optimize_cli_policy_that_never_finishes_ends_at_the_turn_limit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    looping = reply("Let me look again.", tool("no_such_tool", path="x"), tool("read_file", _raw="{not json"))
    with FakeOpenAIServer([], then=looping) as server:
        result = optimize_with(server, tmp_path, max_turns=3)
    assert result.returncode == 1  # no verified candidate
    assert "max_turns after 3 turns; no verified candidate" in result.stdout
    db = sqlite3.connect(data / "cuda-agent.db")
    assert db.execute("SELECT status FROM jobs WHERE kind = 'optimize'").fetchone()[0] == "succeeded"
    observations = [row[0] for row in db.execute("SELECT observations FROM turns ORDER BY `index`")]
    assert len(observations) == 3
    assert "unknown tool" in observations[0] and "no_such_tool" in observations[0]
