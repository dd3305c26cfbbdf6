"""trainer_svc on the real Postgres: the run store syncs a run's directory into its rows, the API validates, scopes
runs to their tenant and accepts a run as a queued start_training job (Redis broker, no worker)."""

# The tests/api fixtures are imported by name (pytest finds fixtures in the module); their parameters shadow them.
# ruff: noqa: F811

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from cuda_agent.contracts.common import JobStatus
from cuda_agent.contracts.train import RunState, RunStatus
from cuda_agent.train import store
from tests.api.conftest import Clients, Tenants, clients, queued_stack, tenants  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration

BODY = {"stage": "rft", "model": "tiny", "trajectory_ids": ["t1"], "hyperparameters": {"steps": 3}}


def ended_process_launcher() -> str:
    """The launcher label of a local process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{store.LOCAL_PREFIX}{socket.gethostname()}:{child.pid}"


def write_status(run_dir: Path, state: RunState, step: int, checkpoint_step: int | None, message: str = "") -> None:
    status = RunStatus(stage="rft", state=state, step=step, checkpoint_step=checkpoint_step, message=message)
    (run_dir / store.STATUS_FILE).write_text(status.model_dump_json())


def test_store_records_steps_checkpoints_and_final_state(pg_url: str, tmp_path: Path) -> None:
    store.create_run("run1", "rft", {"steps": 3}, tenant="tenant-a")
    store.mark_launched("run1", tmp_path, f"{store.LOCAL_PREFIX}{socket.gethostname()}:1")  # pid 1: alive
    lines = [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}]
    (tmp_path / store.METRICS_FILE).write_text("\n".join(json.dumps(x) for x in lines) + '\n{"step": 3, "lo')
    for step in (2, 3):  # step 3's folder is newer than the newest valid checkpoint: half-written, not listed
        (tmp_path / store.CHECKPOINTS_DIR / f"step-{step}").mkdir(parents=True)
    write_status(tmp_path, RunState.RUNNING, step=2, checkpoint_step=2)

    run = store.get_run("run1", "tenant-a")
    assert run is not None
    assert (run.status, run.step, run.metrics) == (JobStatus.RUNNING, 2, {"loss": 1.5})
    assert [(c.step, c.metrics) for c in run.checkpoints] == [(2, {"loss": 1.5})]
    assert store.get_run("run1", "tenant-b") is None  # another tenant's run does not exist for it

    (tmp_path / store.METRICS_FILE).write_text("\n".join(json.dumps(x) for x in [*lines, {"step": 3, "loss": 1.0}]))
    write_status(tmp_path, RunState.FINISHED, step=3, checkpoint_step=3)
    run = store.get_run("run1", "tenant-a")
    assert run is not None
    assert (run.status, run.step, [c.step for c in run.checkpoints]) == (JobStatus.SUCCEEDED, 3, [2, 3])
    steps = store.run_steps("run1", "tenant-a", offset=0, limit=10)
    assert steps is not None and [(s.step, s.metrics["loss"]) for s in steps] == [(1, 2.0), (2, 1.5), (3, 1.0)]


@pytest.mark.parametrize("database", ["embedded_db", "pg_url"])
def test_concurrent_syncs_store_each_step_once(database: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # A reader's sync and the reaper's sync of the same run at once: neither fails, no step is stored twice.
    request.getfixturevalue(database)
    store.create_run("race", "ppo", {}, tenant="tenant-a")
    store.mark_launched("race", tmp_path, f"{store.LOCAL_PREFIX}{socket.gethostname()}:1")  # pid 1: alive
    lines = [{"step": step, "loss": 1.0 / step} for step in range(1, 201)]
    (tmp_path / store.METRICS_FILE).write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    write_status(tmp_path, RunState.RUNNING, step=200, checkpoint_step=None)
    barrier = threading.Barrier(6)

    def sync() -> None:
        barrier.wait()
        store.sync_run("race")

    with ThreadPoolExecutor(6) as pool:
        for future in [pool.submit(sync) for _ in range(6)]:
            future.result()  # re-raises a sync's error
    steps = store.run_steps("race", "tenant-a", offset=0, limit=500)
    assert steps is not None and [s.step for s in steps] == list(range(1, 201))


def test_a_run_whose_process_died_without_a_final_status_failed(pg_url: str, tmp_path: Path) -> None:
    store.create_run("killed", "ppo", {}, tenant="tenant-a")
    store.mark_launched("killed", tmp_path, ended_process_launcher())
    write_status(tmp_path, RunState.RUNNING, step=1, checkpoint_step=None)
    run = store.get_run("killed", "tenant-a")
    assert run is not None and run.status is JobStatus.FAILED
    assert run.error is not None and "without a final status" in run.error

    store.create_run("bad-input", "rft", {}, tenant="tenant-a")
    store.mark_launched("bad-input", tmp_path / "b", ended_process_launcher())
    (tmp_path / "b").mkdir()
    write_status(tmp_path / "b", RunState.FAILED, step=0, checkpoint_step=None, message="no trajectory to train on")
    run = store.get_run("bad-input", "tenant-a")
    assert run is not None and (run.status, run.error) == (JobStatus.FAILED, "no trajectory to train on")


def test_a_run_is_accepted_as_a_queued_start_job(queued_stack: Tenants, clients: Clients) -> None:
    headers = Tenants.header(queued_stack.a) | {"Idempotency-Key": "run-1"}
    response = clients["trainer"].post("/v1/runs", json=BODY, headers=headers)
    assert response.status_code == 202, response.text
    run = response.json()
    assert (run["stage"], run["status"], run["job_id"]) == ("rft", "queued", run["id"])
    job = clients["trainer"].get(f"/v1/jobs/{run['id']}", headers=headers).json()
    assert (job["kind"], job["queue"]) == ("start_training", "train")
    again = clients["trainer"].post("/v1/runs", json=BODY | {"stage": "ppo"}, headers=headers)
    assert again.json()["id"] == run["id"]  # the key names the first run

    listed = clients["trainer"].get("/v1/runs", headers=headers).json()
    assert [r["id"] for r in listed] == [run["id"]]
    other = Tenants.header(queued_stack.b)
    assert clients["trainer"].get("/v1/runs", headers=other).json() == []
    assert clients["trainer"].get(f"/v1/runs/{run['id']}", headers=other).status_code == 404
    assert clients["trainer"].get(f"/v1/runs/{run['id']}/steps", headers=other).status_code == 404
    assert clients["trainer"].get("/v1/runs/nope", headers=headers).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (BODY | {"stage": "dpo"}, "stage"),
        (BODY | {"model": "../etc"}, "model"),
        (BODY | {"model": "/abs/path"}, "model"),
        (BODY | {"trajectory_ids": ["a/b"]}, "trajectory_ids"),
        (BODY | {"hyperparameters": {"steps": 0}}, "hyperparameters.steps"),
        (BODY | {"hyperparameters": {"actor_lr": 5.0}}, "hyperparameters.actor_lr"),
        (BODY | {"hyperparameters": {"init_from": "/etc"}}, "init_from"),
        (BODY | {"hyperparameters": {"no_such_field": 1}}, "no_such_field"),
        (BODY | {"processes": 0}, "processes"),
        (BODY | {"unknown": 1}, "unknown"),
    ],
)
def test_bad_fields_are_422(body: dict[str, Any], field: str, tenants: Tenants, clients: Clients) -> None:
    response = clients["trainer"].post("/v1/runs", json=body, headers=Tenants.header(tenants.a))
    assert response.status_code == 422, response.text
    assert field in response.text


def test_an_unknown_base_model_fails_the_run_with_a_clear_error(tenants: Tenants, clients: Clients) -> None:
    # No broker: the start job runs in the API process, and refuses before launching anything.
    headers = Tenants.header(tenants.a)
    response = clients["trainer"].post("/v1/runs", json=BODY | {"model": "not-installed"}, headers=headers)
    assert response.status_code == 202, response.text
    run = clients["trainer"].get(f"/v1/runs/{response.json()['id']}", headers=headers).json()
    assert run["status"] == "failed"
    assert "no base model 'not-installed'" in run["error"]


def test_the_k8s_job_template_renders_to_a_valid_job() -> None:
    import string

    import kubernetes_validate
    import yaml

    from tests.conftest import ROOT

    text = (ROOT / "k8s" / "jobs" / "train-job.yaml").read_text()
    job = yaml.safe_load(string.Template(text).substitute(RUN_ID="0f3a", STAGE="ppo", GPUS="8"))
    kubernetes_validate.validate(job, "1.30", strict=True)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-1] == "--nproc-per-node=8" and container["args"][2] == "ppo"
    assert container["args"][-1] == "/data/train/runs/0f3a"  # where the start job writes the run's config
