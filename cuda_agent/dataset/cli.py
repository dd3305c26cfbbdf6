"""`cuda-agent dataset ...`: synthesize, filter, export and import training problems (mounted by cuda_agent.cli)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer
from rich.console import Console

from cuda_agent.settings import ConfigError, get_settings

dataset_app = typer.Typer(help="Training problems: synthesize, filter, export, import.", no_args_is_help=True)
console = Console(stderr=True, soft_wrap=True)
F = TypeVar("F", bound=Callable[..., Any])


def _one_line_errors(fn: F) -> F:
    """cuda_agent.cli's one-line errors (imported when called: that module imports this one), with a bad dataset
    file, a taken name, an unknown dataset and filters that could not run counted among them."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from cuda_agent.cli import one_line_errors
        from cuda_agent.dataset.export import DatasetFileError
        from cuda_agent.dataset.pipeline import SynthesisError
        from cuda_agent.dataset.store import DatasetConflict, UnknownDataset

        def translated() -> Any:
            try:
                return fn(*args, **kwargs)
            except (DatasetFileError, DatasetConflict, UnknownDataset, SynthesisError) as exc:
                raise ConfigError(str(exc)) from None

        return one_line_errors(translated)()

    return wrapper  # type: ignore[return-value]


def _database() -> None:
    """The embedded SQLite file is created and migrated on first use (a configured database is migrated by ops)."""
    from cuda_agent.db import upgrade_database

    if get_settings().database_url is None:
        upgrade_database()


def _filter_options(
    device: str, workers: int, compile_backend: str, timeout: float, window: tuple[float, float] | None
) -> dict[str, object]:
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"--device must be cpu or cuda, not {device!r}")
    return {
        "device": device,
        "workers": workers,
        "compile_backend": compile_backend,
        "timeout_s": timeout,
        "time_window_ms": window,
    }


DeviceOpt = Annotated[str, typer.Option(help="cpu or cuda: where the filters run (cuda: CUDA-event timing).")]
WorkersOpt = Annotated[int, typer.Option(help="Parallel sandboxed filter workers; 0: one per core.")]
BackendOpt = Annotated[str, typer.Option(help="torch.compile backend of the compile filter.")]
TimeoutOpt = Annotated[float, typer.Option(help="Seconds one problem's checks may take.")]
WindowOpt = Annotated[
    tuple[float, float] | None, typer.Option(help="Eager time window in ms (default 1-100 cuda, 0.001-1000 cpu).")
]


@dataset_app.command("synthesize")
@_one_line_errors
def synthesize_command(
    n: Annotated[int, typer.Option("-n", help="Problems to keep.")] = 50,
    seed: Annotated[int, typer.Option(help="Same seed and options: same problems.")] = 0,
    name: Annotated[str | None, typer.Option(help="Store as this dataset (default: synth-<seed>-<n>).")] = None,
    out: Annotated[Path | None, typer.Option(help="Also write the problems here (.jsonl or .parquet).")] = None,
    eval_dir: Annotated[Path | None, typer.Option(help="KernelBench files to decontaminate against.")] = None,
    small: Annotated[bool, typer.Option(help="Small shapes (CPU runs, tests).")] = False,
    composer: Annotated[str, typer.Option(help="programmatic | llm.")] = "programmatic",
    endpoint_name: Annotated[
        str, typer.Option("--endpoint", help="The llm composer's configured endpoint.")
    ] = "default",
    device: DeviceOpt = "cpu",
    workers: WorkersOpt = 0,
    compile_backend: BackendOpt = "inductor",
    timeout: TimeoutOpt = 180.0,
    window: WindowOpt = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(help="Keep progress here after every batch; run again with it to go on (another machine too)."),
    ] = None,
) -> None:
    """Compose, filter and deduplicate until N problems are kept; store them and print the statistics."""
    from cuda_agent.dataset.compose import SMALL_SHAPES, ComposeOptions, ShapeOptions
    from cuda_agent.dataset.export import records_from_report, write_records
    from cuda_agent.dataset.pipeline import LLMOptions, SynthesisOptions, synthesize
    from cuda_agent.dataset.store import save_report

    llm = None
    if composer == "llm":
        endpoint = get_settings().llm_endpoint(endpoint_name)
        if endpoint.base_url is None or endpoint.model is None:
            raise ConfigError(f"the llm composer needs endpoint {endpoint_name!r} with a base_url and a model")
        llm = LLMOptions(base_url=endpoint.base_url, model=endpoint.model, api_key=endpoint.api_key.get_secret_value())
    shapes = SMALL_SHAPES if small else ShapeOptions()
    composer_kind: Literal["programmatic", "llm"] = "llm" if composer == "llm" else "programmatic"
    options = SynthesisOptions.model_validate(
        {
            "composer": composer_kind,
            "llm": llm,
            "compose": ComposeOptions(shapes=shapes),
            "filters": _filter_options(device, workers, compile_backend, timeout, window),
            "eval_dir": eval_dir,
        }
    )
    _database()

    def say(kept: int, total: int) -> None:
        console.print(f"kept {kept}/{total}")

    report = synthesize(n, seed, options, progress=say, checkpoint=checkpoint)
    dataset_id = save_report(name or f"synth-{seed}-{n}", report)
    if out is not None:
        write_records(records_from_report(report), out)
    print(json.dumps({"dataset_id": dataset_id, **report.stats.model_dump(mode="json")}, indent=2))


@dataset_app.command("filter")
@_one_line_errors
def filter_command(
    source: Annotated[Path, typer.Argument(help="A dataset file (.jsonl or .parquet).")],
    out: Annotated[Path, typer.Option(help="Where the problems that pass go (.jsonl or .parquet).")],
    device: DeviceOpt = "cpu",
    workers: WorkersOpt = 0,
    compile_backend: BackendOpt = "inductor",
    timeout: TimeoutOpt = 180.0,
    window: WindowOpt = None,
) -> None:
    """Run the execution filters over a dataset file; write the problems that pass, print removals by reason."""
    from cuda_agent.dataset.export import DatasetRecord, read_records, write_records
    from cuda_agent.dataset.filters import FilterOptions, filter_problems

    records = read_records(source)
    options = FilterOptions.model_validate(_filter_options(device, workers, compile_backend, timeout, window))
    verdicts = filter_problems([(str(i), r.code) for i, r in enumerate(records)], options)
    kept: list[DatasetRecord] = []
    removed: dict[str, int] = {}
    for i, record in enumerate(records):
        verdict = verdicts[str(i)]
        if verdict.passed:
            kept.append(record.model_copy(update={"filters": verdict.results}))
            continue
        failure = verdict.failure
        stage = "infrastructure" if verdict.infra_error else f"filter:{failure.name if failure else '?'}"
        removed[stage] = removed.get(stage, 0) + 1
    write_records(kept, out)
    print(json.dumps({"read": len(records), "kept": len(kept), "removed": removed}, indent=2))


@dataset_app.command("export")
@_one_line_errors
def export_command(
    name: Annotated[str, typer.Argument(help="A stored dataset's name.")],
    out: Annotated[Path, typer.Option(help="File to write (.jsonl or .parquet).")],
) -> None:
    """Write a stored dataset to JSONL or parquet."""
    from cuda_agent.dataset.export import write_records
    from cuda_agent.dataset.store import load_dataset

    _database()
    _, records = load_dataset(name)
    write_records(records, out)
    console.print(f"wrote {len(records)} problems to {out}")


@dataset_app.command("import")
@_one_line_errors
def import_command(
    source: Annotated[Path, typer.Argument(help="A dataset file (.jsonl or .parquet) in the export schema.")],
    name: Annotated[str, typer.Option(help="Store under this dataset name.")],
    split: Annotated[str, typer.Option(help="Split of its items.")] = "train",
) -> None:
    """Validate a dataset file and store it as a dataset."""
    from cuda_agent.dataset.export import read_records
    from cuda_agent.dataset.store import save_dataset

    records = read_records(source)
    _database()
    dataset_id = save_dataset(name, records, {"imported_from": source.name}, split=split)
    print(json.dumps({"dataset_id": dataset_id, "problems": len(records)}))
