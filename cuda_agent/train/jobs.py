"""The start_training job (`train` queue): turn a tenant's RunRequest into a TrainConfig, write it to the run's
directory and launch the training process; the job ends as soon as the process runs.

A run takes hours, longer than any queue time limit, so it is a process of its own, not a task: `python -m
cuda_agent.train` for one process, torchrun (`python -m torch.distributed.run`) for several. Its status is read
back from its directory (cuda_agent.train.store.sync_run). The run's id is the job's id, so an idempotent
resubmission names the same run, and a redelivered job finds the run launched and does not launch it twice.

In a deployment the same command runs in a k8s Job (k8s/train-job.yaml) on a GPU node; see docs/training.md.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
from pathlib import Path

from cuda_agent.contracts.common import JobStatus
from cuda_agent.contracts.train import TrainConfig
from cuda_agent.contracts.train_runs import RunRequest, StartTrainingResult
from cuda_agent.jobs.registry import JobContext
from cuda_agent.settings import get_settings
from cuda_agent.train import store

CONFIG_FILE = "config.json"
log = logging.getLogger(__name__)


class RunRefused(ValueError):
    """The request names something the server does not have (a model, a warm-start run): the run fails with it."""


def models_dir() -> Path:
    """Base models the operator installed, one transformers folder per name (tenants name them, never paths)."""
    return get_settings().data_dir / "models"


def runs_dir() -> Path:
    return get_settings().data_dir / "train" / "runs"


def train_config(request: RunRequest, tenant: str | None) -> TrainConfig:
    """The process's configuration: the request's hyperparameters, with its names resolved to server paths."""
    model = models_dir() / request.model
    if not (model / "config.json").is_file():
        raise RunRefused(f"no base model {request.model!r} is installed (models are folders under {models_dir()})")
    init_from = None
    if request.init_from_run is not None:
        init_from = store.newest_checkpoint(request.init_from_run, tenant)
        if init_from is None:
            raise RunRefused(f"run {request.init_from_run} has no checkpoint to start from (or is not yours)")
    return TrainConfig.model_validate(
        {
            **request.hyperparameters,
            "model": str(model),
            "model_name": request.model_name or request.model,
            "init_from": None if init_from is None else str(init_from),
            "trajectory_ids": request.trajectory_ids,
            "tenant": tenant,  # a tenant trains only on its own trajectories
        }
    )


def train_command(stage: str, run_dir: Path, processes: int) -> list[str]:
    """The command that runs one stage; torchrun for several processes (one per GPU of the host)."""
    entry = ["-m", "cuda_agent.train", stage, "--config", str(run_dir / CONFIG_FILE), "--run-dir", str(run_dir)]
    if processes == 1:
        return [sys.executable, *entry]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}", *entry]


def _reap(process: subprocess.Popen[bytes], run_id: str) -> None:
    # Waiting reaps the child (no zombie in a long-lived worker) and records a death the run could not report.
    exit_code = process.wait()
    try:
        store.sync_run(run_id, exit_code=exit_code)
    except Exception:  # e.g. the database is away: the next read of the run syncs it (its process is gone then)
        log.exception("could not record the end of training run %s (exit code %s)", run_id, exit_code)


def launch_local(run_id: str, stage: str, run_dir: Path, processes: int) -> str:
    """Start the run's process on this host, detached from the caller's session (it outlives the job and, in the
    embedded CLI, the command); returns its launcher label."""
    with (run_dir / store.LOG_FILE).open("ab") as log:
        process = subprocess.Popen(
            train_command(stage, run_dir, processes),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    launcher = f"{store.LOCAL_PREFIX}{socket.gethostname()}:{process.pid}"
    store.mark_launched(run_id, run_dir, launcher)
    threading.Thread(target=_reap, args=(process, run_id), name=f"reap-{run_id}", daemon=True).start()
    return launcher


def start_training_job(request: RunRequest, context: JobContext) -> StartTrainingResult:
    run_id = context.job_id
    run = store.create_run(
        run_id, request.stage, request.model_dump(mode="json"), tenant=context.tenant, job_id=context.job_id
    )
    if run.launcher is not None:  # a redelivery of a job whose attempt launched the run before it died
        return StartTrainingResult(run_id=run_id, launcher=run.launcher)
    try:
        config = train_config(request, context.tenant)
    except RunRefused as exc:
        store.finish_run(run_id, JobStatus.FAILED, str(exc))
        raise
    run_dir = runs_dir() / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(config.model_dump_json(indent=2))
    return StartTrainingResult(run_id=run_id, launcher=launch_local(run_id, request.stage, run_dir, request.processes))
