"""The `cuda-agent` command. Every subcommand runs the same library code as the services.

Without DATABASE_URL/REDIS_URL it is the embedded default: SQLite under the data dir, tasks in-process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from cuda_agent.bench.optimize_bench import Against
from cuda_agent.contracts.candidate import CandidateForm
from cuda_agent.contracts.common import Device, JobKind, QueueName, TolerancePreset
from cuda_agent.dataset.cli import dataset_app
from cuda_agent.settings import ConfigError, get_settings
from cuda_agent.train.cli import serve_policy, train_app

app = typer.Typer(help=__doc__, no_args_is_help=True, pretty_exceptions_enable=False)
db_app = typer.Typer(help="Database migrations.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks that print figures.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(bench_app, name="bench")
app.add_typer(dataset_app, name="dataset")
app.add_typer(train_app, name="train")
app.command("serve-policy")(serve_policy)
console = Console(stderr=True, soft_wrap=True)
F = TypeVar("F", bound=Callable[..., Any])

SERVICES = ("compile", "eval", "agent", "dataset", "trainer")


def one_line_errors(fn: F) -> F:
    """Configuration problems end the command with one clear line and exit code 2, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from cuda_agent.jobs import JobFailed

        try:
            return fn(*args, **kwargs)
        except (ConfigError, JobFailed) as exc:
            console.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _startup(check_broker: bool) -> None:
    """Fail fast, before binding a port or joining a queue, when configuration cannot work."""
    from cuda_agent.api.readiness import check_broker as broker_check
    from cuda_agent.db import check_database
    from cuda_agent.logging import configure_logging

    settings = get_settings()
    configure_logging(settings.log_level, settings.log_json)
    check_database()
    if check_broker:
        broker_check()


@db_app.command("upgrade")
@one_line_errors
def db_upgrade(revision: str = "head") -> None:
    """Apply migrations (waits up to 60 s for the database to answer)."""
    import time

    from cuda_agent.db import check_database, upgrade_database

    deadline = time.monotonic() + 60
    while True:
        try:
            check_database()
            break
        except ConfigError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    upgrade_database(revision)
    console.print(f"database at {revision}: {get_settings().sqlalchemy_url.split('@')[-1]}")


@app.command()
@one_line_errors
def serve(
    service: Annotated[str, typer.Argument(help=f"One of: {', '.join(SERVICES)}")],
    host: str = "127.0.0.1",
    port: int = 8000,
) -> None:
    """Run a service's HTTP API."""
    if service not in SERVICES:
        raise ConfigError(f"unknown service {service!r}; choose one of {', '.join(SERVICES)}")
    import uvicorn

    _startup(check_broker=not get_settings().embedded)
    uvicorn.run(f"services.{service}_svc.api:app", host=host, port=port, log_config=None)


@app.command()
@one_line_errors
def worker(
    queues: Annotated[list[QueueName], typer.Argument(help="Queues to consume.")],
    concurrency: Annotated[int, typer.Option(help="Processes; forced to 1 for GPU queues.")] = 2,
    hostname: Annotated[str | None, typer.Option(help="Celery node name.")] = None,
) -> None:
    """Run a Celery worker on the given queues."""
    from cuda_agent.queue.app import GPU_QUEUES

    settings = get_settings()
    if settings.embedded:
        raise ConfigError("a worker needs REDIS_URL (and DATABASE_URL): the embedded default runs tasks in-process")
    _startup(check_broker=True)
    from cuda_agent.queue import celery_app

    if GPU_QUEUES.intersection(queues):
        concurrency = 1  # one task per GPU at a time; more GPUs means more workers, each pinned
    name = hostname or f"{'-'.join(q.value for q in queues)}@%h"
    celery_app.worker_main(
        [
            "worker",
            "-Q",
            ",".join(q.value for q in queues),
            "--concurrency",
            str(concurrency),
            "-n",
            name,
            "--loglevel",
            settings.log_level,
            "--without-gossip",
            "--without-mingle",
        ]
    )


def _print_result(document: dict[str, Any], as_json: bool, summary: str) -> None:
    if as_json:
        print(json.dumps(document, indent=2))
    else:
        Console(soft_wrap=True).print(summary, highlight=False)


@app.command("compile")
@one_line_errors
def compile_command(
    candidate: Annotated[Path, typer.Argument(help="model_new.py (KernelBench form) or a folder with kernels/.")],
    device: Annotated[Device, typer.Option(help="cuda: nvcc; cpu: g++ with OpenMP.")] = Device.CUDA,
    arch: Annotated[str | None, typer.Option(help="e.g. sm_90a; default: the GPU's, else sm_90a.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Build a candidate in the sandbox (cached) and print diagnostics and per-kernel resources."""
    from cuda_agent.contracts.candidate import CandidateFileError, read_candidate
    from cuda_agent.contracts.common import CompileStatus
    from cuda_agent.contracts.compile import CompileRequest
    from cuda_agent.jobs import run_to_result
    from cuda_agent.jobs.registry import COMPILE_JOB

    try:
        request = CompileRequest(candidate=read_candidate(candidate), device=device, arch=arch)
    except CandidateFileError as exc:
        raise ConfigError(str(exc)) from None
    _ensure_embedded_db()
    result = run_to_result(COMPILE_JOB, request)
    lines = [
        f"{result.status.value}: {result.message} ({result.duration_s:.2f} s{', cached' if result.cache_hit else ''})"
    ]
    lines += [
        f"  {d.file}:{d.line}: {d.severity}: {d.message}" + (f"\n    hint: {d.hint}" if d.hint else "")
        for d in result.diagnostics
    ]
    lines += [
        f"  kernel {r.kernel}: {r.registers} regs, {r.shared_bytes} B smem, spills {r.spill_stores_bytes}"
        for r in result.resources
    ]
    _print_result(result.model_dump(mode="json"), as_json, "\n".join(lines))
    if result.status is not CompileStatus.OK:
        raise typer.Exit(1)


@app.command()
@one_line_errors
def verify(
    problem: Annotated[Path, typer.Option(help="KernelBench problem file (Model, get_inputs, get_init_inputs).")],
    candidate: Annotated[Path, typer.Option(help="model_new.py (KernelBench form) or a folder with kernels/.")],
    device: Annotated[Device, typer.Option()] = Device.CUDA,
    tolerance: Annotated[TolerancePreset, typer.Option()] = TolerancePreset.KERNELBENCH,
    trials: Annotated[int, typer.Option(help="Timing trials.")] = 100,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Compile, verify and time a candidate against eager and torch.compile; print the verdict and reward."""
    from cuda_agent.contracts.candidate import CandidateFileError, read_candidate
    from cuda_agent.contracts.common import EvalStatus
    from cuda_agent.contracts.eval import EvalOptions
    from cuda_agent.verify import JobBackend, verify_candidate

    if not problem.is_file():
        raise ConfigError(f"{problem}: no such problem file")
    try:
        source = read_candidate(candidate)
    except CandidateFileError as exc:
        raise ConfigError(str(exc)) from None
    _ensure_embedded_db()
    options = EvalOptions(device=device, tolerance=tolerance, timing_trials=trials)
    built, result = verify_candidate(problem.read_text(), source, options, JobBackend())
    if result is None:
        _print_result(built.model_dump(mode="json"), as_json, f"{built.status.value}: {built.message}")
        raise typer.Exit(1)
    summary = (
        f"{result.status.value}: reward {result.reward}, speedup vs eager {_fmt(result.speedup_vs_eager)}, "
        f"vs compile {_fmt(result.speedup_vs_compile)} ({result.trials_passed}/{result.trials_run} trials)"
        + (f"\n  {result.message}" if result.message else "")
        + "".join(f"\n  finding {f.code}: {f.message}" for f in result.findings)
    )
    _print_result(result.model_dump(mode="json"), as_json, summary)
    if result.status is not EvalStatus.CORRECT:
        raise typer.Exit(1)


def _fmt(speedup: float | None) -> str:
    return f"{speedup:.2f}x" if speedup is not None else "n/a"


def _ensure_embedded_db() -> None:
    """The embedded SQLite file is created and migrated on first use."""
    from cuda_agent.db import upgrade_database

    if get_settings().database_url is None:
        upgrade_database()


@app.command()
@one_line_errors
def optimize(
    problem: Annotated[Path, typer.Argument(help="KernelBench problem file.")],
    policy: Annotated[
        str | None,
        typer.Option(
            help="openai | multi | replay | heuristic (default: openai where an LLM endpoint is configured, else "
            "heuristic, the built-in kernel author)"
        ),
    ] = None,
    device: Annotated[Device, typer.Option()] = Device.CUDA,
    max_turns: Annotated[int | None, typer.Option(help="Turn limit (default from settings, at most 200).")] = None,
    tolerance: Annotated[TolerancePreset, typer.Option()] = TolerancePreset.KERNELBENCH,
    form: Annotated[
        CandidateForm, typer.Option(help="Candidate layout: project, kernelbench, or workdir (the CUDA Agent paper's).")
    ] = CandidateForm.PROJECT,
    policy_option: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE passed to the policy, e.g. trajectory=path.jsonl")
    ] = None,
    out: Annotated[Path, typer.Option(help="Where model_new.py, kernels/, report.json, trajectory.jsonl go.")] = Path(
        "out"
    ),
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run an agent rollout on PROBLEM and write the best ModelNew, its verdict and the trajectory to --out."""
    import threading

    from rich.live import Live

    from cuda_agent.agent.jobs import load_trajectory
    from cuda_agent.agent.policies import names_an_endpoint, policy_for
    from cuda_agent.contracts.agent import RolloutConfig, RolloutRequest
    from cuda_agent.contracts.common import JobStatus
    from cuda_agent.jobs import create_job, dispatch, get_job

    if not problem.is_file():
        raise ConfigError(f"{problem}: no such problem file")
    options = dict(item.split("=", 1) for item in policy_option or [] if "=" in item)
    if policy_option and len(options) != len(policy_option):
        raise ConfigError("--policy-option takes KEY=VALUE")
    policy = policy_for(policy, options)
    policy_options: dict[str, Any] = dict(options)
    if policy == "replay" and "trajectory" in options:  # a path to a trajectory JSONL file: replay its first line
        lines = Path(options["trajectory"]).read_text().splitlines()
        policy_options["trajectory"] = json.loads(lines[0]) if lines else {}
    if names_an_endpoint(policy) and "base_url" in options:  # the operator's server: a job cannot carry a URL or key
        from cuda_agent.agent.policies.openai_policy import use_local_endpoint

        policy_options["endpoint"] = use_local_endpoint(
            policy_options.pop("base_url"), model=options.get("model"), api_key=policy_options.pop("api_key", None)
        )
    request = RolloutRequest(
        problem_source=problem.read_text(),
        policy=policy,
        policy_options=policy_options,
        config=RolloutConfig(max_turns=max_turns, device=device, tolerance=tolerance, form=form),
    )
    _ensure_embedded_db()
    job, _ = create_job(JobKind.OPTIMIZE, request)
    # Embedded mode runs the job in this process: a thread runs it while the main thread shows its progress.
    runner = threading.Thread(target=dispatch, args=(job,), daemon=True)
    runner.start()
    last_verdict = "none yet"  # a turn's progress names its own verifications only: keep the latest across turns
    with Live(console=console, transient=True, refresh_per_second=4) as live:
        while not (view := get_job(job.id)).status.terminal:
            p = view.progress
            verdicts = [e for e in p.get("events", []) if e.get("kind") == "verify"]
            if verdicts:
                last_verdict = f"{verdicts[-1]['status']} ({_fmt(verdicts[-1].get('speedup_vs_eager'))})"
            live.update(
                f"[bold]{policy}[/bold] on {problem.name}: {view.status.value}, turn {p.get('turn', 0)} "
                f"({', '.join(p.get('tools', [])) or 'no tool'}), last verdict {last_verdict}, "
                f"best reward {p.get('best_reward')}, best speedup {_fmt(p.get('best_speedup'))}"
            )
            runner.join(timeout=0.5)
    if view.status is not JobStatus.SUCCEEDED or view.result is None:
        raise ConfigError(f"optimize job {job.id} {view.status.value}: {view.error or 'no result'}")
    report = _write_optimize_output(out, view.result, load_trajectory(view.result["trajectory_id"]))
    if form is CandidateForm.WORKDIR and view.result.get("best"):
        from cuda_agent.workdir.convert import complete_workspace

        complete_workspace(out, request.problem_source)  # runnable by the released environment's scripts
    best = view.result.get("best")
    verdict = best["result"] if best else None
    summary = (
        f"{view.result['termination']} after {view.result['turns']} turns; "
        + (
            f"best: {verdict['status']}, reward {verdict['reward']}, speedup vs eager "
            f"{_fmt(verdict['speedup_vs_eager'])}, vs compile {_fmt(verdict['speedup_vs_compile'])}"
            if verdict
            else "no verified candidate"
        )
        + f"\nwrote {report}"
    )
    _print_result(view.result, as_json, summary)
    if verdict is None or verdict["status"] != "correct":
        raise typer.Exit(1)


def _write_optimize_output(out: Path, result: dict[str, Any], trajectory: Any) -> Path:
    """model_new.py (+ kernels/) of the best candidate, report.json and trajectory.jsonl under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    best = result.get("best")
    if best:
        for name, text in best["candidate"]["files"].items():
            target = (out / name).resolve()
            if out.resolve() not in target.parents:  # file names came from the agent: keep them inside out/
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    (out / "report.json").write_text(json.dumps(result, indent=2))
    if trajectory is not None:
        (out / "trajectory.jsonl").write_text(trajectory.model_dump_json() + "\n")
    return out / "report.json"


@bench_app.command("compile")
def bench_compile(
    load_inline: Annotated[bool, typer.Option(help="Also time a cold load_inline build (minutes).")] = True,
) -> None:
    """Cold fast-path build vs load_inline vs the bare nvcc -cubin floor, and the cache hit."""
    from cuda_agent.compile.bench import run_compile_benchmark

    print(json.dumps(run_compile_benchmark(include_load_inline=load_inline), indent=2))


@bench_app.command("eval")
@one_line_errors
def bench_eval(
    problems: Annotated[
        Path | None, typer.Option(help="Folder of cases: <name>/problem.py beside <name>/model_new.py + kernels/.")
    ] = None,
    problem: Annotated[Path | None, typer.Option(help="One problem file instead of --problems.")] = None,
    candidate: Annotated[Path | None, typer.Option(help="The candidate of --problem.")] = None,
    only: Annotated[list[str] | None, typer.Option(help="Only this case of --problems (repeatable).")] = None,
    device: Annotated[Device, typer.Option()] = Device.CUDA,
    scale: Annotated[
        float, typer.Option(help="Shrink the problems' leading dimension, 0 < scale <= 1 (their SCALE line).")
    ] = 1.0,
    repeats: Annotated[
        int, typer.Option(min=1, help="Verdicts with cached baselines after the first; the last is reported.")
    ] = 1,
    tolerance: Annotated[TolerancePreset, typer.Option()] = TolerancePreset.KERNELBENCH,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write every figure here.")] = None,
) -> None:
    """Verdicts beside the in-process floor: wall time, where it went, peak GPU/host memory, disk writes.

    The floor runs problem and candidate in a plain process, unsandboxed: benchmark trusted code only.
    Exits 1 when a case misses the acceptance rule printed with the table.
    """
    import os
    import sys

    from cuda_agent.bench.cases import BenchCase, BenchError, discover_cases

    if (problems is None) == (problem is None) or (problem is None) != (candidate is None):
        raise ConfigError("give either --problems DIR, or --problem FILE with --candidate PATH")
    if only and problems is None:
        raise ConfigError("--only picks cases of --problems DIR")
    try:
        if problems is not None:
            cases = discover_cases(problems, only or ())
        else:
            assert problem is not None and candidate is not None
            if not problem.is_file():
                raise BenchError(f"{problem}: no such problem file")
            cases = [BenchCase(problem.stem, problem, candidate)]
    except BenchError as exc:
        raise ConfigError(str(exc)) from None
    if device is Device.CUDA:
        # As GPU eval workers are deployed (docker-compose.yml, k8s/eval-worker.yaml): three evaluations' worth
        # of warm children. Settings are read once; drop a copy read before this line.
        os.environ.setdefault("CUDA_AGENT_EVAL_WARM_CHILDREN", "6")
        get_settings.cache_clear()
    from cuda_agent.bench.eval_bench import BenchFigures, render, run_eval_bench

    def save(figures: BenchFigures) -> None:
        if json_out is not None:  # after every case: a run cut short keeps what it measured
            json_out.write_text(figures.model_dump_json(indent=2))

    try:
        figures = run_eval_bench(
            cases,
            device=device,
            scale=scale,
            repeats=repeats,
            tolerance=tolerance,
            say=lambda line: console.print(line, highlight=False),
            on_case=save,
        )
    except BenchError as exc:
        raise ConfigError(str(exc)) from None
    # Fifteen columns: piped into a log, the table gets room instead of the 80 columns rich assumes.
    render(figures, Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200))
    if json_out is not None:
        console.print(f"wrote {json_out}", highlight=False)
    if not figures.ok:
        raise typer.Exit(1)


@bench_app.command("coverage")
@one_line_errors
def bench_coverage(
    count: Annotated[int, typer.Option(min=1, max=100_000, help="Problems to compose.")] = 300,
    seed: Annotated[int, typer.Option(help="Which set of compositions.")] = 7,
    threshold: Annotated[float, typer.Option(min=0.0, max=1.0, help="Least share authored (else exit 1).")] = 0.0,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the figures here.")] = None,
) -> None:
    """The kernel author's coverage of composed problems it has never seen (CPU, no compilation)."""
    from cuda_agent.bench.coverage import render, run_coverage

    figures = run_coverage(count, seed)
    render(figures, threshold, Console(soft_wrap=True))
    if json_out is not None:
        json_out.write_text(figures.model_dump_json(indent=2))
    if figures.share < threshold:
        raise typer.Exit(1)


@bench_app.command("optimize")
@one_line_errors
def bench_optimize(
    problems: Annotated[Path, typer.Option(help="Folder of KernelBench problem files (*.py).")],
    threshold: Annotated[float, typer.Option(help="Least verified speedup every problem must reach.")] = 1.05,
    against: Annotated[Against, typer.Option(help="The baseline the threshold applies to.")] = Against.EAGER,
    policy: Annotated[str, typer.Option(help="The policy that optimizes each problem.")] = "heuristic",
    device: Annotated[Device, typer.Option()] = Device.CUDA,
    time_budget_s: Annotated[float, typer.Option(min=1, help="Wall-clock budget of each problem's rollout.")] = 300.0,
    only: Annotated[list[str] | None, typer.Option(help="Only this problem (file stem; repeatable).")] = None,
    tolerance: Annotated[TolerancePreset, typer.Option()] = TolerancePreset.KERNELBENCH,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write every figure here.")] = None,
    resume: Annotated[
        bool, typer.Option(help="Keep the rows already in --json and optimize only the problems it lacks.")
    ] = False,
    redo: Annotated[
        list[str] | None, typer.Option(help="With --resume: optimize this problem again all the same (repeatable).")
    ] = None,
) -> None:
    """The optimize job on every problem: a table, a summary, and the CI gate.

    Exits 1 unless every problem returns a verified kernel at least THRESHOLD times faster than --against.
    """
    import sys

    from cuda_agent.bench.cases import BenchError
    from cuda_agent.bench.optimize_bench import OptimizeBenchFigures, discover_problems, render, run_optimize_bench

    try:
        paths = discover_problems(problems, only or ())
    except BenchError as exc:
        raise ConfigError(str(exc)) from None
    earlier = None
    if resume:
        if json_out is None:
            raise ConfigError("--resume continues the figures of --json FILE: name the file")
        if json_out.exists():
            try:
                earlier = OptimizeBenchFigures.model_validate_json(json_out.read_text())
            except ValueError as exc:
                raise ConfigError(f"--json {json_out}: not figures of bench optimize ({exc})") from None
            # A newer version of the author measured again: its rows replace the ones kept.
            again = set(redo or ())
            earlier.rows = [row for row in earlier.rows if row.problem not in again]
    elif redo:
        raise ConfigError("--redo re-measures problems of an earlier run: it goes with --resume")
    _ensure_embedded_db()

    def save(figures: OptimizeBenchFigures) -> None:
        if json_out is not None:  # after every problem: a run cut short keeps what it measured
            json_out.write_text(figures.model_dump_json(indent=2))

    try:
        figures = run_optimize_bench(
            paths,
            policy=policy,
            device=device,
            threshold=threshold,
            against=against,
            tolerance=tolerance,
            time_budget_s=time_budget_s,
            say=lambda line: console.print(line, highlight=False),
            on_row=save,
            earlier=earlier,
        )
    except BenchError as exc:
        raise ConfigError(str(exc)) from None
    render(figures, Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200))
    if not figures.ok:
        raise typer.Exit(1)


@app.command("apikey")
@one_line_errors
def apikey(tenant: str, name: Annotated[str | None, typer.Option(help="A label for the key.")] = None) -> None:
    """Create an API key for TENANT and print it (shown once)."""
    from cuda_agent.api.auth import create_api_key

    try:
        print(create_api_key(tenant, name))
    except ValueError as exc:  # a tenant name that cannot be one
        raise ConfigError(str(exc)) from None


@app.command()
def doctor(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Check nvcc, torch, the GPU, the database, the broker and the sandbox; one line each."""
    from cuda_agent.doctor import run_checks

    try:
        checks = run_checks()
    except ConfigError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    if as_json:
        print(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        table = Table("check", "", "detail", show_header=False, box=None)
        for c in checks:
            mark = "[green]ok[/green]" if c.ok else ("[red]FAIL[/red]" if c.required else "[yellow]--[/yellow]")
            table.add_row(c.name, mark, c.detail)
        Console().print(table)
    if any(c.required and not c.ok for c in checks):
        raise typer.Exit(1)


@app.command()
@one_line_errors
def selftest(
    parts: Annotated[
        str, typer.Option(help="Comma-separated: tenancy, sandbox, hacks, faults, badinput, load (default: not load).")
    ] = "",
    device: Annotated[Device, typer.Option(help="Device of the candidates' builds and evaluations.")] = Device.CPU,
    only: Annotated[str | None, typer.Option(help="Comma-separated attack and hack names: run just those.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the full report here.")] = None,
    keep: Annotated[bool, typer.Option(help="Keep the stack's temp dir (service and worker logs).")] = False,
) -> None:
    """Start a private stack on loopback, attack it, and print tried / held / failed per part; exit 1 on a failure."""
    from cuda_agent.selftest import DEFAULT_PARTS, UnknownName, passed, render, run_selftest, to_json
    from cuda_agent.selftest.stack import StackError

    chosen = [p.strip() for p in parts.split(",") if p.strip()] or list(DEFAULT_PARTS)
    names = {n.strip() for n in only.split(",") if n.strip()} if only else None
    out = Console()
    try:
        reports = run_selftest(
            chosen, device, only=names, keep=keep, on_part=lambda r: console.print(f"{r.part}: {r.held}/{r.tried} held")
        )
    except (UnknownName, StackError) as exc:
        raise ConfigError(str(exc)) from None
    render(reports, out)
    if json_out is not None:
        json_out.write_text(json.dumps(to_json(reports), indent=2))
    if not passed(reports):
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
