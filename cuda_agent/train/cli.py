"""`cuda-agent train rft|value|ppo` and `cuda-agent serve-policy`.

A `train` command submits the same start_training job as POST /v1/runs (embedded: it runs here and launches the
training process on this host; with a broker: a `train` worker launches it) and, with --wait, follows the run
until it ends, printing each step's metrics. The process itself is `python -m cuda_agent.train` (see
cuda_agent.train.jobs); run that directly to train without the platform's database.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any, get_args

import typer
from pydantic import ValidationError

from cuda_agent.contracts.train import TrainStage

train_app = typer.Typer(help="Train the policy: RFT, critic value pretraining, PPO.", no_args_is_help=True)
POLL_S = 2.0


def _hyperparameters(pairs: list[str]) -> dict[str, Any]:
    """KEY=VALUE pairs; a value is read as JSON when it parses (numbers, booleans, null), else as text."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--set")
        try:
            values[key] = json.loads(raw)
        except json.JSONDecodeError:
            values[key] = raw
    return values


def _follow(run_id: str) -> int:
    """Print the run's new steps until it ends; the exit code: 0 when it succeeded."""
    from cuda_agent.train.store import get_run, run_steps

    printed = 0
    while True:
        run = get_run(run_id, tenant=None)
        assert run is not None  # created by the start job
        for entry in run_steps(run_id, None, offset=printed, limit=1000) or []:
            typer.echo(json.dumps({"step": entry.step, **entry.metrics}))
            printed += 1
        if run.status.terminal:
            typer.echo(f"run {run_id} {run.status.value}{f': {run.error}' if run.error else ''}", err=True)
            return 0 if run.status.value == "succeeded" else 1
        time.sleep(POLL_S)


def _train(stage: TrainStage) -> Any:
    def command(
        model: Annotated[str, typer.Option(help="Base model: a folder name under DATA_DIR/models.")],
        trajectory: Annotated[
            list[str] | None, typer.Option(help="A stored trajectory id (repeat); rft and value train on them.")
        ] = None,
        init_from_run: Annotated[str | None, typer.Option(help="Start from this run's newest checkpoint.")] = None,
        model_name: Annotated[
            str | None, typer.Option(help="The name the trajectories' policy served under (default: --model).")
        ] = None,
        set_: Annotated[
            list[str] | None, typer.Option("--set", help="A TrainConfig hyperparameter, KEY=VALUE (repeat).")
        ] = None,
        processes: Annotated[int, typer.Option(help="torchrun processes (one per GPU).")] = 1,
        wait: Annotated[bool, typer.Option(help="Follow the run until it ends, printing each step.")] = True,
    ) -> None:
        from cuda_agent.cli import _ensure_embedded_db, one_line_errors
        from cuda_agent.contracts.common import JobKind
        from cuda_agent.contracts.train_runs import RunRequest
        from cuda_agent.jobs import submit_job
        from cuda_agent.settings import ConfigError

        @one_line_errors
        def start() -> str:
            _ensure_embedded_db()
            try:
                request = RunRequest(
                    stage=stage,
                    model=model,
                    model_name=model_name,
                    init_from_run=init_from_run,
                    trajectory_ids=trajectory or [],
                    hyperparameters=_hyperparameters(set_ or []),
                    processes=processes,
                )
            except ValidationError as exc:  # one line naming the field, like the API's 422
                first = exc.errors()[0]
                raise ConfigError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
            return submit_job(JobKind.START_TRAINING, request).id

        run_id = start()
        typer.echo(run_id)
        if wait:
            raise typer.Exit(_follow(run_id))

    command.__doc__ = f"Start a {stage} run (the run id is printed first)."
    return command


for _stage in get_args(TrainStage):
    train_app.command(_stage)(_train(_stage))


def serve_policy(
    checkpoint: Annotated[Path, typer.Argument(help="A transformers model folder or a training checkpoint.")],
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    model_name: Annotated[
        str | None, typer.Option(help="The model name clients ask for (default: the folder's name).")
    ] = None,
    device: Annotated[str | None, typer.Option(help="torch device (default: cuda when present, else cpu).")] = None,
) -> None:
    """Serve a checkpoint as an OpenAI-compatible chat-completions endpoint (tool calls, token logprobs)."""
    from cuda_agent.train.serve import serve

    serve(checkpoint, host=host, port=port, model_name=model_name, device=device)
