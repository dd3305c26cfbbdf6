"""A run started through trainer_svc trains for real: the start_training job launches `python -m cuda_agent.train`
on the tiny local model (PPO on the toy task, a few steps) and the run's rows follow its directory to the end."""

# The tests/api fixtures are imported by name (pytest finds fixtures in the module); their parameters shadow them.
# ruff: noqa: F811

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cuda_agent.settings import get_settings
from cuda_agent.train.tiny import build_tiny_model
from cuda_agent.train.toy import TOY_WORDS
from tests.api.conftest import Clients, Tenants, clients, tenants  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration

STEPS = 3


def wait_terminal(clients: Clients, run_id: str, headers: dict[str, str], timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run = clients["trainer"].get(f"/v1/runs/{run_id}", headers=headers).json()
        if run["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return run
        time.sleep(1.0)


def test_a_started_run_trains_and_reaches_a_terminal_state(tenants: Tenants, clients: Clients) -> None:
    build_tiny_model(get_settings().data_dir / "models" / "tiny", TOY_WORDS)
    body = {
        "stage": "ppo",
        "model": "tiny",
        "hyperparameters": {"steps": STEPS, "rollouts_per_step": 4, "checkpoint_every": 2, "actor_lr": 1e-3},
    }
    headers = Tenants.header(tenants.a)
    response = clients["trainer"].post("/v1/runs", json=body, headers=headers)
    assert response.status_code == 202, response.text
    run_id = response.json()["id"]
    job = clients["trainer"].get(f"/v1/jobs/{run_id}", headers=headers).json()
    assert job["status"] == "succeeded" and job["result"]["run_id"] == run_id  # the job ends once launched

    run = wait_terminal(clients, run_id, headers, timeout_s=150)
    log = Path(get_settings().data_dir / "train" / "runs" / run_id / "train.log")
    assert run["status"] == "succeeded", f"{run}\n{log.read_text()[-3000:]}"
    assert run["step"] == STEPS and {"entropy", "clip_fraction", "tokens_per_s"} <= run["metrics"].keys()
    assert [c["step"] for c in run["checkpoints"]][-1] == STEPS  # the final step is always checkpointed
    steps = clients["trainer"].get(f"/v1/runs/{run_id}/steps", headers=headers).json()
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    for thread in threading.enumerate():  # the launcher's reaper records the exit; let it finish on this database
        if thread.name == f"reap-{run_id}":
            thread.join(timeout=60)


def test_the_train_command_runs_a_stage_and_prints_its_steps(tmp_path: Path) -> None:
    from tests.conftest import cli

    build_tiny_model(get_settings().data_dir / "models" / "tiny", TOY_WORDS)
    sets = ["--set", "steps=2", "--set", "rollouts_per_step=4", "--set", "checkpoint_every=1"]
    result = cli("train", "ppo", "--model", "tiny", *sets, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    run_id, *steps = result.stdout.splitlines()
    assert [json.loads(line)["step"] for line in steps] == [1, 2]
    assert f"run {run_id} succeeded" in result.stderr
    assert (get_settings().data_dir / "train" / "runs" / run_id / "checkpoints" / "step-000002").is_dir()
