"""`cuda-agent verify` on the embedded default: the real command, compile and evaluate jobs in SQLite, on the CPU."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.agent.agent_fixtures import PROBLEM
from tests.agent.test_rollout_e2e import FIX, KERNEL, MODEL_NEW
from tests.conftest import cli

pytestmark = pytest.mark.sandbox


def verify(tmp_path: Path, kernel: str, *extra: str) -> tuple[int, str, str]:
    problem, candidate = tmp_path / "problem.py", tmp_path / "candidate"
    problem.write_text(PROBLEM)
    (candidate / "kernels").mkdir(parents=True, exist_ok=True)
    (candidate / "model_new.py").write_text(MODEL_NEW)
    (candidate / "kernels" / "add.cpp").write_text(kernel)
    result = cli(
        *("verify", "--problem", str(problem), "--candidate", str(candidate), "--device", "cpu", "--trials", "3"),
        *extra,
        env={"CUDA_AGENT_DATA_DIR": str(tmp_path / "data")},
        timeout=600,
    )
    return result.returncode, result.stdout, result.stderr


@pytest.mark.slow
def test_verify_cli_compiles_then_judges(tmp_path: Path) -> None:
    code, out, err = verify(tmp_path, KERNEL.replace(FIX["old_string"], FIX["new_string"]), "--json")
    assert code == 0, out + err
    verdict = json.loads(out)  # stdout is the verdict alone; logs go to stderr
    assert verdict["status"] == "correct" and verdict["reward"] >= 1 and verdict["candidate_timing"]["trials"] == 3
    db = sqlite3.connect(tmp_path / "data" / "cuda-agent.db")
    assert dict(db.execute("SELECT kind, count(*) FROM jobs GROUP BY kind").fetchall()) == {
        "compile": 1,
        "evaluate": 1,
    }


def test_verify_cli_stops_at_a_compile_error(tmp_path: Path) -> None:
    code, out, err = verify(tmp_path, KERNEL)
    assert code == 1 and out.startswith("compile_error:"), out + err
    db = sqlite3.connect(tmp_path / "data" / "cuda-agent.db")
    assert [k for (k,) in db.execute("SELECT kind FROM jobs")] == ["compile"]
