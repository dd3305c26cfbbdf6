"""Training runs in the database: a ``training_runs`` row per run, ``training_steps`` rows of per-step metrics and
``checkpoints`` rows, all scoped to the tenant that started the run.

The training process never writes the database (it runs under torchrun or in a k8s Job, possibly without database
credentials): it writes its run directory (``status.json``, ``metrics.jsonl``, ``checkpoints/step-N/``), and
``sync_run`` copies what is new into the rows whenever a run is read, and when its local process ends. Rows are
keyed by run and step, so syncing twice stores nothing twice; a run resumed from a checkpoint records the steps
after it again, and those already stored keep their first metrics.

Imports no torch: trainer_svc's API process uses this module.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cuda_agent.contracts.common import JobStatus
from cuda_agent.contracts.train import RunState, RunStatus
from cuda_agent.contracts.train_runs import CheckpointView, RunDetail, RunSummary, StepMetrics
from cuda_agent.db import session_scope
from cuda_agent.db.models import Checkpoint, TrainingRun, TrainingStep

STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
LOG_FILE = "train.log"  # the process's stdout and stderr
CHECKPOINTS_DIR = "checkpoints"
LOCAL_PREFIX = "local:"
# The run's own final state, as the DB spells it.
FINAL_STATUS = {RunState.FINISHED: JobStatus.SUCCEEDED, RunState.FAILED: JobStatus.FAILED}


def _now() -> datetime:
    return datetime.now(UTC)


def create_run(
    run_id: str, stage: str, config: dict[str, Any], *, tenant: str | None, job_id: str | None = None
) -> TrainingRun:
    """The run's row, created queued if it does not exist yet (the start job and the API both call this)."""
    try:
        with session_scope() as session:
            run = session.get(TrainingRun, run_id)
            if run is None:
                run = TrainingRun(id=run_id, algorithm=stage, config=config, tenant=tenant, job_id=job_id)
                session.add(run)
                session.flush()
            session.expunge(run)
            return run
    except IntegrityError:  # the other caller inserted it between our read and our insert: theirs stands
        with session_scope() as session:
            run = _get(session, run_id)
            session.expunge(run)
            return run


def mark_launched(run_id: str, run_dir: Path, launcher: str) -> None:
    with session_scope() as session:
        run = _get(session, run_id)
        run.run_dir, run.launcher = str(run_dir), launcher
        run.status, run.started_at = JobStatus.RUNNING, _now()


def finish_run(run_id: str, status: JobStatus, error: str | None = None) -> None:
    """Give a run its final status; a run already final keeps the one it has (the first writer wins)."""
    with session_scope() as session:
        run = _get(session, run_id)
        if not run.status.terminal:
            run.status, run.error, run.finished_at = status, error, _now()


def record_step(session: Session, run: TrainingRun, step: int, metrics: dict[str, Any]) -> None:
    row = session.get(TrainingStep, (run.id, step))
    if row is None:
        session.add(TrainingStep(run_id=run.id, step=step, metrics=metrics))
    else:
        row.metrics = metrics
    if step >= run.step:
        run.step, run.metrics = step, metrics


def record_checkpoint(session: Session, run: TrainingRun, step: int, uri: str) -> None:
    if session.scalar(select(Checkpoint).where(Checkpoint.run_id == run.id, Checkpoint.step == step)) is None:
        at_step = session.get(TrainingStep, (run.id, step))
        session.add(Checkpoint(run_id=run.id, step=step, uri=uri, metrics=at_step.metrics if at_step else {}))


def _get(session: Session, run_id: str, *, lock: bool = False) -> TrainingRun:
    run = session.get(TrainingRun, run_id, with_for_update=lock)
    if run is None:
        raise LookupError(f"training run {run_id} not found")
    return run


def _read_status(run_dir: Path) -> RunStatus | None:
    try:
        return RunStatus.model_validate_json((run_dir / STATUS_FILE).read_text())
    except (OSError, ValidationError):  # not written yet, or caught mid-write: the next read sees it whole
        return None


def _read_metrics(run_dir: Path, after_step: int) -> list[tuple[int, dict[str, Any]]]:
    try:
        lines = (run_dir / METRICS_FILE).read_text().splitlines()
    except OSError:
        return []
    steps = []
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # the last line may be half-written
            continue
        step = entry.pop("step", None)
        if isinstance(step, int) and step > after_step:
            steps.append((step, entry))
    return steps


def _checkpoints(run_dir: Path, newest_valid: int | None) -> list[tuple[int, Path]]:
    """Checkpoint folders up to the newest the run calls valid (a newer one may be half-written)."""
    if newest_valid is None:
        return []
    found = []
    for folder in (run_dir / CHECKPOINTS_DIR).glob("step-*"):
        step = folder.name.removeprefix("step-")
        if step.isdigit() and int(step) <= newest_valid:
            found.append((int(step), folder))
    return sorted(found)


def _process_gone(launcher: str | None) -> bool:
    """True when the run's local process has ended; a process on another host (or a k8s Job) is not judged."""
    if launcher is None or not launcher.startswith(LOCAL_PREFIX):
        return False
    host, _, pid = launcher.removeprefix(LOCAL_PREFIX).rpartition(":")
    if host != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def sync_run(run_id: str, exit_code: int | None = None) -> None:
    """Copy what the run directory says that the rows do not yet: new steps, valid checkpoints, the final state.
    A local run whose process is gone without a final state failed (killed, or crashed before writing one);
    ``exit_code``: the caller reaped the process and says how it ended."""
    # Two syncs at once (a reader's and the reaper's) read the same last step; Postgres serializes them on the run
    # row's lock, SQLite has no row locks and the later insert of a step fails: read again, and the steps the other
    # stored are no longer new. Each failure means another sync stored steps, so a few tries suffice.
    for attempt in range(3):
        try:
            return _sync(run_id, exit_code)
        except IntegrityError:
            if attempt == 2:
                raise


def _sync(run_id: str, exit_code: int | None) -> None:
    with session_scope() as session:
        run = _get(session, run_id, lock=True)
        if run.run_dir is None or run.status.terminal:
            return
        run_dir = Path(run.run_dir)
        # Status before metrics: the run writes a step's metrics before the status that counts it, so the metrics
        # read here cover every step the status read says is done (a final status included).
        status = _read_status(run_dir)
        for step, metrics in _read_metrics(run_dir, after_step=run.step):
            record_step(session, run, step, metrics)
        if status is not None:
            for step, folder in _checkpoints(run_dir, status.checkpoint_step):
                record_checkpoint(session, run, step, str(folder))
            if status.state in FINAL_STATUS:
                run.status, run.finished_at = FINAL_STATUS[status.state], _now()
                run.error = status.message if status.state is RunState.FAILED else None
                return
        if exit_code is not None or _process_gone(run.launcher):
            # Read again: the process may have written its final state between the first read and its exit.
            if (final := _read_status(run_dir)) is not None and final.state in FINAL_STATUS:
                return  # the next sync records it
            how = "ended" if exit_code is None else f"exited with code {exit_code}"
            run.status, run.finished_at = JobStatus.FAILED, _now()
            run.error = f"the training process {how} without a final status (killed or crashed); see {LOG_FILE}"


def _visible(run: TrainingRun | None, tenant: str | None) -> bool:
    return run is not None and (tenant is None or run.tenant == tenant)


def get_run(run_id: str, tenant: str | None) -> RunDetail | None:
    """The run, synced from its directory; None when it does not exist or is another tenant's (tenant None: any)."""
    with session_scope() as session:
        if not _visible(session.get(TrainingRun, run_id), tenant):
            return None
    sync_run(run_id)
    with session_scope() as session:
        run = _get(session, run_id)
        checkpoints = session.scalars(select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.step))
        return RunDetail.model_validate(
            {
                **RunSummary.model_validate(run).model_dump(),
                "config": run.config,
                "job_id": run.job_id,
                "checkpoints": [CheckpointView.model_validate(c) for c in checkpoints],
            }
        )


def list_runs(tenant: str | None, offset: int, limit: int) -> list[RunSummary]:
    """The tenant's runs, newest first, each synced from its directory while it is not final."""
    with session_scope() as session:
        query = select(TrainingRun.id, TrainingRun.status).order_by(TrainingRun.created_at.desc(), TrainingRun.id)
        if tenant is not None:
            query = query.where(TrainingRun.tenant == tenant)
        page = session.execute(query.offset(offset).limit(limit)).all()
    for run_id, status in page:
        if not status.terminal:
            sync_run(run_id)
    with session_scope() as session:
        runs = session.scalars(
            select(TrainingRun)
            .where(TrainingRun.id.in_([run_id for run_id, _ in page]))
            .order_by(TrainingRun.created_at.desc(), TrainingRun.id)
        )
        return [RunSummary.model_validate(run) for run in runs]


def run_steps(run_id: str, tenant: str | None, offset: int, limit: int) -> list[StepMetrics] | None:
    """One page of the run's per-step metrics, oldest first; None when the run is not the tenant's."""
    if get_run(run_id, tenant) is None:
        return None
    with session_scope() as session:
        rows = session.scalars(
            select(TrainingStep)
            .where(TrainingStep.run_id == run_id)
            .order_by(TrainingStep.step)
            .offset(offset)
            .limit(limit)
        )
        return [StepMetrics.model_validate(row) for row in rows]


def newest_checkpoint(run_id: str, tenant: str | None) -> Path | None:
    """The newest checkpoint folder of the tenant's run (a warm start for the next stage); None if it has none."""
    detail = get_run(run_id, tenant)
    if detail is None or not detail.checkpoints:
        return None
    return Path(detail.checkpoints[-1].uri)
