"""``cuda-agent bench eval``: full verdicts on (large) problems beside the in-process floor, with what they cost.

Per case: size the problem on the meta device, build the candidate, measure the floor (``floor.py``), then run
the verdict ``1 + repeats`` times through ``cuda_agent.eval.evaluate``: the first measures and caches the eager
and ``torch.compile`` baselines, the last is the one reported and judged. Around each verdict a
``ResourceMonitor`` samples GPU memory, the host memory of this process tree and the bytes it writes.

Acceptance (issue 12): the cached verdict is correct, agrees with the floor's allclose, and takes at most
``ACCEPT_FACTOR`` x the floor + ``ACCEPT_SLACK_S``.
"""

from __future__ import annotations

import datetime
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table

from cuda_agent.bench.cases import BenchCase, BenchError, ProblemSizes, meta_sizes, pin_scale
from cuda_agent.bench.floor import FloorFigures, FloorRequest, run_floor
from cuda_agent.bench.monitor import ResourceFigures, ResourceMonitor
from cuda_agent.compile import compile_candidate, materialize_artifact
from cuda_agent.contracts.candidate import CandidateFileError, CandidateForm, read_candidate
from cuda_agent.contracts.common import CompileStatus, Device, TolerancePreset
from cuda_agent.contracts.compile import CompileRequest
from cuda_agent.contracts.eval import EvalRequest, EvalResult
from cuda_agent.eval import evaluate
from cuda_agent.gpu import select_gpu
from cuda_agent.problem import ProblemError
from cuda_agent.settings import get_settings

ACCEPT_FACTOR = 1.5
ACCEPT_SLACK_S = 2.0
ACCEPTANCE_RULE = (
    f"the verdict with cached baselines is correct, agrees with the floor's allclose and takes "
    f"<= {ACCEPT_FACTOR} x floor + {ACCEPT_SLACK_S:g} s"
)


class VerdictFigures(BaseModel):
    wall_s: float = Field(description="evaluate() as called here, from the call to its return.")
    baselines_cached: bool = Field(description="False for the first verdict of a case, which measured them.")
    status: str
    correct: bool
    reward: float | None
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    candidate_median_ms: float | None
    eager_median_ms: float | None
    compile_median_ms: float | None
    max_abs_error: float | None
    message: str
    findings: list[str]
    notes: list[str]
    timeline_s: dict[str, float]
    resources: ResourceFigures
    result: dict[str, Any] = Field(description="The whole EvalResult, with any figures the harness adds.")


class Acceptance(BaseModel):
    ok: bool
    verdict_s: float | None = None
    limit_s: float | None = Field(None, description=f"{ACCEPT_FACTOR} x floor_s + {ACCEPT_SLACK_S} s.")
    reasons: list[str] = Field(default_factory=list, description="Why not, when ok is False.")


class CaseFigures(BaseModel):
    name: str
    problem: str
    candidate: str
    sizes: ProblemSizes | None = None
    compile_status: str | None = None
    compile_s: float | None = None
    floor: FloorFigures | None = None
    verdicts: list[VerdictFigures] = Field(default_factory=list)
    candidate_median_cov_pct: float | None = Field(
        None, description="Coefficient of variation of the candidate's median over the cached verdicts (>= 2)."
    )
    acceptance: Acceptance = Field(default_factory=lambda: Acceptance(ok=False))
    error: str | None = Field(None, description="Why the case stopped before its verdicts.")

    @property
    def cached(self) -> VerdictFigures | None:
        return self.verdicts[-1] if self.verdicts and self.verdicts[-1].baselines_cached else None


class BenchFigures(BaseModel):
    started_at: str
    device: Device
    gpu: str | None
    scale: float
    repeats: int
    tolerance: TolerancePreset
    warm_children: int
    acceptance_rule: str = ACCEPTANCE_RULE
    cases: list[CaseFigures]

    @property
    def ok(self) -> bool:
        return all(case.acceptance.ok for case in self.cases)


def _verdict_figures(result: EvalResult, wall_s: float, cached: bool, resources: ResourceFigures) -> VerdictFigures:
    def median(timing: object) -> float | None:
        return getattr(timing, "median_ms", None)

    return VerdictFigures(
        wall_s=wall_s,
        baselines_cached=cached,
        status=result.status.value,
        correct=result.correct,
        reward=result.reward,
        speedup_vs_eager=result.speedup_vs_eager,
        speedup_vs_compile=result.speedup_vs_compile,
        candidate_median_ms=median(result.candidate_timing),
        eager_median_ms=median(result.eager_timing),
        compile_median_ms=median(result.compile_timing),
        max_abs_error=result.max_abs_error,
        message=result.message,
        findings=[f"{f.code}: {f.message}" for f in result.findings],
        notes=result.notes,
        timeline_s=result.timeline_s,
        resources=resources,
        result=result.model_dump(mode="json"),
    )


def judge(case: CaseFigures) -> Acceptance:
    """The acceptance of one case from its figures."""
    reasons: list[str] = []
    cached, floor = case.cached, case.floor
    if case.error:
        reasons.append(case.error)
    if cached is None:
        reasons.append("no verdict with cached baselines")
    elif not cached.correct:
        reasons.append(f"verdict {cached.status}: {cached.message}".rstrip(": "))
    if floor is None or floor.error:
        reasons.append(f"no floor: {floor.error if floor else 'not measured'}")
    elif not floor.correct:
        reasons.append(f"floor allclose failed: {floor.failure}")
    limit = None
    if floor is not None and not floor.error and floor.correct:
        limit = ACCEPT_FACTOR * floor.floor_s + ACCEPT_SLACK_S
        if cached is not None and cached.wall_s > limit:
            reasons.append(f"verdict {cached.wall_s:.2f} s > {limit:.2f} s")
    if cached is not None and floor is not None and floor.correct is not None and cached.correct != floor.correct:
        reasons.append("the verdict and the floor's allclose disagree")
    return Acceptance(ok=not reasons, verdict_s=cached.wall_s if cached else None, limit_s=limit, reasons=reasons)


def run_case(
    case: BenchCase,
    *,
    device: Device,
    scale: float,
    repeats: int,
    tolerance: TolerancePreset,
    gpu_index: int | None,
    say: Callable[[str], None],
) -> CaseFigures:
    figures = CaseFigures(name=case.name, problem=str(case.problem), candidate=str(case.candidate))
    try:
        source = pin_scale(case.problem.read_text(), scale, str(case.problem))
        figures.sizes = meta_sizes(source, filename=str(case.problem))
        candidate = read_candidate(case.candidate)
    except (ProblemError, CandidateFileError, OSError) as exc:
        figures.error = str(exc)
        figures.acceptance = judge(figures)
        return figures

    say(f"{case.name}: compiling")
    try:
        built = compile_candidate(CompileRequest(candidate=candidate, device=device))
    except Exception as exc:  # a build fault ends this case, not the run: the other cases still get measured
        figures.error = f"compile_candidate raised {type(exc).__name__}: {exc}"
        figures.acceptance = judge(figures)
        return figures
    figures.compile_status, figures.compile_s = built.status.value, built.duration_s
    if built.status is not CompileStatus.OK or built.artifact_key is None:
        figures.error = f"compile {built.status.value}: {built.message}"
        figures.acceptance = judge(figures)
        return figures
    request = EvalRequest(
        problem_source=source, candidate=candidate, artifact_key=built.artifact_key, device=device, tolerance=tolerance
    )

    if candidate.form is CandidateForm.PROJECT:
        say(f"{case.name}: floor (in-process loop)")
        floor_req = FloorRequest(
            problem_source=source,
            model_new=candidate.model_new,
            device=device.value,
            correctness_trials=request.correctness_trials,
            timing_trials=request.timing_trials,
            warmup=request.warmup,
        )
        # The evaluation children see their GPU under the NVML (PCI bus) order; so does the floor.
        pin = {} if gpu_index is None else {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(gpu_index)}
        with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
            try:
                runtime = materialize_artifact(built.artifact_key, Path(tmp))
            except Exception as exc:
                figures.floor = FloorFigures(error=f"materialize_artifact raised {type(exc).__name__}: {exc}")
            else:
                figures.floor = run_floor(floor_req, {**runtime.env, **pin}, get_settings().eval_timeout_s)
    else:  # load_inline extensions load only at the sandbox path they were built at
        figures.floor = FloorFigures(error="the floor runs project-form candidates only")

    # Evaluation children write in temporary directories; caches and artifacts live in the data dir.
    watch = [Path(tempfile.gettempdir()), get_settings().data_dir]
    for attempt in range(1 + repeats):
        say(f"{case.name}: verdict {attempt + 1}/{1 + repeats}" + ("" if attempt else " (measures baselines)"))
        with ResourceMonitor(gpu_index, watch=watch) as monitor:
            started = time.perf_counter()
            try:
                result = evaluate(request)
            except Exception as exc:  # evaluate() must not raise; when it does, the other cases still run
                figures.error = f"evaluate() raised {type(exc).__name__}: {exc}"
                break
            wall_s = time.perf_counter() - started
        figures.verdicts.append(_verdict_figures(result, wall_s, attempt > 0, monitor.figures))
    medians = [v.candidate_median_ms for v in figures.verdicts[1:] if v.candidate_median_ms is not None]
    if len(medians) >= 2:
        figures.candidate_median_cov_pct = 100 * statistics.pstdev(medians) / statistics.fmean(medians)
    figures.acceptance = judge(figures)
    return figures


def run_eval_bench(
    cases: Sequence[BenchCase],
    *,
    device: Device = Device.CUDA,
    scale: float = 1.0,
    repeats: int = 1,
    tolerance: TolerancePreset = TolerancePreset.KERNELBENCH,
    say: Callable[[str], None] = lambda _: None,
    on_case: Callable[[BenchFigures], None] = lambda _: None,
) -> BenchFigures:
    """Benchmark every case in turn. ``say`` hears progress lines; ``on_case`` gets the figures so far after each
    case (to save them: a run cut short by a time limit still leaves its finished cases)."""
    if repeats < 1:
        raise BenchError("repeats must be >= 1: the reported verdict is one with cached baselines")
    if not 0.0 < scale <= 1.0:
        raise BenchError(f"scale must be in (0, 1], got {scale}")
    settings = get_settings()
    gpu = select_gpu(settings.gpu_index) if device is Device.CUDA else None
    figures = BenchFigures(
        started_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        device=device,
        gpu=gpu.name if gpu else None,
        scale=scale,
        repeats=repeats,
        tolerance=tolerance,
        warm_children=settings.eval_warm_children,
        cases=[],
    )
    for number, case in enumerate(cases, 1):

        def say_numbered(line: str, prefix: str = f"[{number}/{len(cases)}]") -> None:
            say(f"{prefix} {line}")

        figures.cases.append(
            run_case(
                case,
                device=device,
                scale=scale,
                repeats=repeats,
                tolerance=tolerance,
                gpu_index=gpu.index if gpu else None,
                say=say_numbered,
            )
        )
        say_numbered(summary(figures.cases[-1]))
        on_case(figures)
    return figures


def summary(case: CaseFigures) -> str:
    """One line per finished case, for progress logs."""
    cached, acceptance = case.cached, case.acceptance
    verdict = f"{cached.status}, verdict {cached.wall_s:.2f} s" if cached else (case.error or "no verdict")
    limit = f", limit {acceptance.limit_s:.2f} s" if acceptance.limit_s is not None else ""
    return f"{case.name}: {verdict}{limit}: " + ("accepted" if acceptance.ok else "NOT accepted")


def _gb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e9:.2f}"


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _floor_line(floor: FloorFigures) -> str:
    if floor.error:
        return floor.error
    parts = f"setup {floor.setup_s:.2f} + correctness {floor.correctness_s:.2f} + timing {floor.timing_s:.2f}"
    return (
        f"{floor.floor_s:.2f} s = {parts} (process {floor.process_wall_s:.2f} s, startup {floor.startup_s:.2f}); "
        f"allclose {'ok' if floor.correct else floor.failure}; candidate median {_s(floor.candidate_median_ms)} ms; "
        f"GPU allocated peak {_gb(floor.gpu_peak_allocated_bytes)} GB"
    )


def _harness_figures(result: dict[str, Any]) -> str:
    """Memory and disk figures the evaluation reports itself, where this version of it does."""
    peaks = result.get("peak_memory_bytes", {})
    parts = [f"peak torch memory {child} {_gb(value)} GB" for child, value in peaks.items()]
    if result.get("disk_bytes_written") is not None:
        parts.append(f"child directories {_mb(result['disk_bytes_written'])} MB")
    return ", ".join(parts)


def render(figures: BenchFigures, console: Console) -> None:
    """The table of every case, then per case where the verdict's time went."""
    table = Table(
        title=f"bench eval: {figures.device.value}{f' ({figures.gpu})' if figures.gpu else ''}, scale "
        f"{figures.scale:g}, tolerance {figures.tolerance.value}",
        caption=f"verdict s: the last of {1 + figures.repeats} verdicts per problem, baselines cached (the first "
        f"measured them). GPU peak: NVML used memory, all processes. host peak: sum of RSS of this process tree. "
        f"disk: peak growth of the used space where children write. written: bytes the tree wrote to files (a "
        f"lower bound). accept: {figures.acceptance_rule}.",
    )
    for column in ("problem", "out GB", "verdict", "reward", "vs eager", "vs compile", "1st s", "verdict s"):
        table.add_column(column, justify="left" if column in ("problem", "verdict") else "right")
    for column in ("floor s", "limit s", "accept", "GPU peak GB", "host peak GB", "disk MB", "written MB"):
        table.add_column(column, justify="right")
    for case in figures.cases:
        cached = case.cached
        first = case.verdicts[0] if case.verdicts else None
        resources = cached.resources if cached else None
        floor_s = case.floor.floor_s if case.floor and not case.floor.error and case.floor.correct else None
        table.add_row(
            case.name,
            _gb(case.sizes.output_bytes if case.sizes else None),
            cached.status if cached else ("error" if case.error else "-"),
            "-" if cached is None or cached.reward is None else f"{cached.reward:g}",
            _x(cached.speedup_vs_eager if cached else None),
            _x(cached.speedup_vs_compile if cached else None),
            _s(first.wall_s if first else None),
            _s(cached.wall_s if cached else None),
            _s(floor_s),
            _s(case.acceptance.limit_s),
            "[green]yes[/green]" if case.acceptance.ok else "[red]no[/red]",
            _gb(resources.gpu_used_peak_bytes if resources else None),
            _gb(resources.host_rss_peak_bytes if resources else None),
            _mb(resources.disk_used_growth_peak_bytes if resources else None),
            _mb(resources.write_bytes if resources else None),
        )
    console.print(table)
    for case in figures.cases:
        console.print(f"[bold]{case.name}[/bold]", highlight=False)
        if case.sizes:
            console.print(
                f"  sizes: in {_gb(case.sizes.input_bytes)} GB, out {_gb(case.sizes.output_bytes)} GB "
                f"({', '.join(case.sizes.outputs)}), parameters {_mb(case.sizes.parameter_bytes)} MB",
                highlight=False,
            )
        floor = case.floor
        if floor is not None:
            console.print(f"  floor: {_floor_line(floor)}", highlight=False)
        cached = case.cached
        if cached is not None:
            events = sorted(cached.timeline_s.items(), key=lambda item: item[1])
            console.print(
                f"  verdict: {cached.status} ({cached.message or 'no message'}); candidate median "
                f"{_s(cached.candidate_median_ms)} ms, eager {_s(cached.eager_median_ms)} ms, compile "
                f"{_s(cached.compile_median_ms)} ms; GPU before {_gb(cached.resources.gpu_used_before_bytes)} GB",
                highlight=False,
            )
            went = ", ".join(f"{event} {seconds:.2f}" for event, seconds in events)
            console.print(f"  where the time went (s since the call): {went}", highlight=False)
            own = _harness_figures(cached.result)
            if own:
                console.print(f"  the harness's own figures: {own}", highlight=False)
        if case.candidate_median_cov_pct is not None:
            console.print(f"  CV of the candidate's median over cached verdicts: {case.candidate_median_cov_pct:.3f} %")
        if not case.acceptance.ok:
            console.print("  [red]not accepted:[/red] " + "; ".join(case.acceptance.reasons), highlight=False)
