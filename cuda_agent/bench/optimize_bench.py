"""The CI benchmark gate (issue 14): ``cuda-agent bench optimize`` runs the optimize job on every problem of a folder.

Each problem goes through the same job as ``cuda-agent optimize`` (stored, dispatched: in this process on the
embedded default, to a worker otherwise) with the named policy. A row is read from what any policy leaves behind
-- the job's result (the best candidate's verdict, timings and reward) and the stored trajectory (its compile and
verify events) -- never from a policy's internals, so whatever author stands behind a policy name is measured the
same way.

The gate: a problem passes when its returned candidate is verified correct and its speedup over the chosen
baseline (eager PyTorch by default, or torch.compile) is at least the threshold. A problem with no verified
kernel -- unsupported, wrong, or a failed job -- has no speedup and fails the gate: CI asks for fast kernels,
and a missing one is not fast.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, computed_field
from rich.console import Console
from rich.table import Table

from cuda_agent.bench.cases import BenchError, pick
from cuda_agent.contracts.common import Device, TolerancePreset

if TYPE_CHECKING:  # the CLI imports this module for its option types: keep its start-up light
    from cuda_agent.contracts.agent import RewardEvent
    from cuda_agent.contracts.eval import TimingStats
    from cuda_agent.contracts.jobs import OptimizeResult

# "More than 5% faster than torch.compile", the measure of a kernel worth having.
FASTER_THAN_COMPILE = 1.05
# Beyond the rollout's own time budget: the last evaluation may start just before the budget runs out.
JOB_TIMEOUT_SLACK_S = 900.0
NO_BUDGET_TIMEOUT_S = 24 * 3600.0


class Against(StrEnum):
    """The baseline the threshold applies to."""

    EAGER = "eager"
    COMPILE = "compile"


class OptimizeRow(BaseModel):
    """One problem's optimize job, as the gate and the table see it."""

    problem: str
    supported: bool = Field(
        description="The policy submitted at least one candidate (a compile or verify event); an author that "
        "cannot express the problem finishes without one."
    )
    correct: bool = Field(description="The returned (best) candidate was verified correct.")
    confirmed: bool | None = Field(
        None, description="The returned candidate was correct again in the job's fresh evaluation (new seeds)."
    )
    status: str | None = Field(None, description="Verdict status of the returned candidate; None when there is none.")
    eager_ms: float | None = None
    compile_ms: float | None = None
    ours_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    reward: float | None = None
    variants: int = Field(0, description="Candidates the rollout verified (verify events of its trajectory).")
    gpu: str | None = Field(
        None, description="The GPU that timed the returned candidate and its baselines (rows resumed across device "
        "calls may come from different cards: compare a row's figures with each other, not across cards)."
    )  # fmt: skip
    wall_s: float
    termination: str | None = None
    detail: str = Field("", description="The rollout's termination detail, or why the job failed.")
    passed: bool = False

    def speedup(self, against: Against) -> float | None:
        """The verified speedup over ``against``; None without a verified kernel (or one its second evaluation
        found wrong)."""
        if not self.correct or self.confirmed is False:
            return None
        return self.speedup_vs_eager if against is Against.EAGER else self.speedup_vs_compile


class OptimizeSummary(BaseModel):
    problems: int
    supported_share: float
    verified_share: float = Field(description="Share of problems that returned a verified-correct kernel.")
    confirmed: int = Field(0, description="Returned verified kernels correct again in a fresh evaluation.")
    faster_than_compile_share: float = Field(
        description=f"Share of problems whose verified kernel beats torch.compile by more than "
        f"{FASTER_THAN_COMPILE - 1:.0%}."
    )
    geomean_vs_compile: float | None = Field(None, description="Over the verified kernels with a compile baseline.")
    geomean_vs_eager: float | None = Field(None, description="Over the verified kernels.")
    passed: int


class OptimizeBenchFigures(BaseModel):
    policy: str
    device: Device
    threshold: float
    against: Against
    time_budget_s: float | None
    rows: list[OptimizeRow] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def summary(self) -> OptimizeSummary:
        return summarize(self.rows)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(row.passed for row in self.rows)


def discover_problems(root: Path, only: Sequence[str] = ()) -> list[Path]:
    """The problem files (``*.py``) directly under ``root``, sorted by name, or the ones named (by stem) in ``only``."""
    if not root.is_dir():
        raise BenchError(f"{root}: no such folder of problems")
    found = {path.stem: path for path in sorted(root.glob("*.py"))}
    if not found:
        raise BenchError(f"{root}: no problem files (*.py)")
    return pick(found, only, "problem", root)


def passes(row: OptimizeRow, threshold: float, against: Against) -> bool:
    speedup = row.speedup(against)
    return speedup is not None and speedup >= threshold


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(rows: Sequence[OptimizeRow]) -> OptimizeSummary:
    n = len(rows)
    vs_compile = [s for r in rows if (s := r.speedup(Against.COMPILE)) is not None]
    vs_eager = [s for r in rows if (s := r.speedup(Against.EAGER)) is not None]
    return OptimizeSummary(
        problems=n,
        supported_share=sum(r.supported for r in rows) / n if n else 0.0,
        verified_share=sum(r.correct for r in rows) / n if n else 0.0,
        confirmed=sum(bool(r.correct and r.confirmed) for r in rows),
        faster_than_compile_share=sum(s > FASTER_THAN_COMPILE for s in vs_compile) / n if n else 0.0,
        geomean_vs_compile=_geomean(vs_compile),
        geomean_vs_eager=_geomean(vs_eager),
        passed=sum(r.passed for r in rows),
    )


def row_from_job(
    problem: str, result: OptimizeResult | None, events: Sequence[RewardEvent], wall_s: float
) -> OptimizeRow:
    """A row from an optimize job's result and its trajectory's reward events (None result: the job failed)."""
    row = OptimizeRow(
        problem=problem,
        supported=bool(events),
        correct=False,
        variants=sum(1 for e in events if e.kind == "verify"),
        wall_s=wall_s,
    )
    if result is not None:
        row.termination = result.termination.value if result.termination else None
        row.detail = result.termination_detail
    if result is None or result.best is None:
        return row
    verdict, again = result.best.result, result.confirmation

    def median(timing: TimingStats | None) -> float | None:
        return timing.median_ms if timing else None

    return row.model_copy(
        update={
            "correct": verdict.correct,
            "status": verdict.status.value,
            "eager_ms": median(verdict.eager_timing),
            "compile_ms": median(verdict.compile_timing),
            "ours_ms": median(verdict.candidate_timing),
            "speedup_vs_eager": verdict.speedup_vs_eager,
            "speedup_vs_compile": verdict.speedup_vs_compile,
            "reward": verdict.reward,
            "confirmed": again.correct if again is not None else None,
            "gpu": verdict.fingerprint.gpu_name if verdict.fingerprint else None,
        }
    )


def optimize_problem(
    path: Path,
    *,
    policy: str,
    device: Device,
    tolerance: TolerancePreset,
    time_budget_s: float | None,
) -> OptimizeRow:
    """Run the optimize job on one problem file and read its row (``passed`` is left to the gate)."""
    from cuda_agent.agent.jobs import load_trajectory
    from cuda_agent.contracts.agent import RolloutConfig, RolloutRequest
    from cuda_agent.contracts.common import JobKind, JobStatus
    from cuda_agent.contracts.jobs import OptimizeResult
    from cuda_agent.jobs import submit_job, wait_for_job

    request = RolloutRequest(
        problem_source=path.read_text(),
        policy=policy,
        config=RolloutConfig(device=device, tolerance=tolerance, wall_clock_s=time_budget_s),
    )
    start = time.monotonic()
    job = submit_job(JobKind.OPTIMIZE, request)  # embedded: the job runs here, before this returns
    timeout_s = time_budget_s + JOB_TIMEOUT_SLACK_S if time_budget_s else NO_BUDGET_TIMEOUT_S
    try:
        finished = wait_for_job(job.id, timeout_s=timeout_s)
    except TimeoutError as exc:  # a worker that never finishes costs this problem its row, not the whole run
        row = row_from_job(path.stem, None, [], time.monotonic() - start)
        return row.model_copy(update={"detail": str(exc)})
    wall_s = time.monotonic() - start
    if finished.status is not JobStatus.SUCCEEDED or finished.result is None:
        row = row_from_job(path.stem, None, [], wall_s)
        return row.model_copy(update={"detail": f"optimize job {finished.status.value}: {finished.error or ''}"})
    result = OptimizeResult.model_validate(finished.result)
    trajectory = load_trajectory(result.trajectory_id)
    return row_from_job(path.stem, result, trajectory.reward_events if trajectory is not None else [], wall_s)


def run_optimize_bench(
    problems: Sequence[Path],
    *,
    policy: str,
    device: Device,
    threshold: float,
    against: Against = Against.EAGER,
    tolerance: TolerancePreset = TolerancePreset.KERNELBENCH,
    time_budget_s: float | None = None,
    say: Callable[[str], None] = lambda line: None,
    on_row: Callable[[OptimizeBenchFigures], None] = lambda figures: None,
    earlier: OptimizeBenchFigures | None = None,
) -> OptimizeBenchFigures:
    """Optimize every problem in turn; ``on_row`` sees the figures after each, so a run cut short keeps them.
    ``earlier``: the figures of a run cut short, whose rows are kept and whose problems are not optimized again
    (a suite larger than one sitting spreads over several)."""
    figures = OptimizeBenchFigures(
        policy=policy, device=device, threshold=threshold, against=against, time_budget_s=time_budget_s
    )
    if earlier is not None:
        settings = (earlier.policy, earlier.device, earlier.against, earlier.time_budget_s)
        if settings != (policy, device, against, time_budget_s):
            raise BenchError(
                f"the earlier figures were measured with policy {earlier.policy}, device {earlier.device.value}, "
                f"against {earlier.against.value}, budget {earlier.time_budget_s} s: resume with the same settings"
            )
        figures.rows = [r.model_copy(update={"passed": passes(r, threshold, against)}) for r in earlier.rows]
        done = {r.problem for r in earlier.rows}
        problems = [p for p in problems if p.stem not in done]
        say(f"resuming: {len(done)} problems measured earlier, {len(problems)} left")
    for n, path in enumerate(problems, start=1):
        say(f"[{n}/{len(problems)}] {path.stem}: optimizing with {policy} on {device.value}")
        row = optimize_problem(path, policy=policy, device=device, tolerance=tolerance, time_budget_s=time_budget_s)
        row.passed = passes(row, threshold, against)
        figures.rows.append(row)
        say(
            f"[{n}/{len(problems)}] {path.stem}: {row.status or 'no kernel'}, {_x(row.speedup(against))} vs "
            f"{against.value} in {row.wall_s:.0f} s" + (f" ({row.detail})" if not row.correct and row.detail else "")
        )
        on_row(figures)
    return figures


def _ms(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def _share(value: float) -> str:
    return f"{value:.0%}"


def render(figures: OptimizeBenchFigures, console: Console) -> None:
    """The per-problem table, the summary, and the gate's rule with its outcome."""
    table = Table(title=f"optimize: policy {figures.policy} on {figures.device.value}")
    for column in ("problem", "supported", "correct", "eager ms", "compile ms", "ours ms", "vs eager", "vs compile"):
        table.add_column(column, justify="left" if column == "problem" else "right")
    for column in ("again", "reward", "variants", "wall s", "gate"):
        table.add_column(column, justify="right")
    for r in figures.rows:
        table.add_row(
            r.problem,
            "yes" if r.supported else "no",
            "yes" if r.correct else ("no" if r.status else "-"),
            _ms(r.eager_ms),
            _ms(r.compile_ms),
            _ms(r.ours_ms),
            _x(r.speedup_vs_eager),
            _x(r.speedup_vs_compile),
            "-" if r.confirmed is None else "yes" if r.confirmed else "no",
            f"{r.reward:g}" if r.reward is not None else "-",
            str(r.variants),
            f"{r.wall_s:.1f}",
            "[green]pass[/green]" if r.passed else "[red]FAIL[/red]",
        )
    console.print(table)
    s = figures.summary
    console.print(
        f"summary: {s.problems} problems; supported {_share(s.supported_share)}; returned verified "
        f"{_share(s.verified_share)} (correct again on fresh seeds: {s.confirmed}); "
        f">{FASTER_THAN_COMPILE - 1:.0%} faster than torch.compile {_share(s.faster_than_compile_share)}; "
        f"geomean vs compile {_x(s.geomean_vs_compile)}, vs eager {_x(s.geomean_vs_eager)}",
        highlight=False,
    )
    cards = Counter(r.gpu or "not recorded" for r in figures.rows if r.correct)
    if set(cards) != {"not recorded"}:  # rows resumed from other device calls: which card timed how many
        console.print("timed on: " + ", ".join(f"{gpu} ({n})" for gpu, n in cards.most_common()), highlight=False)
    console.print(
        f"gate: each problem needs a verified kernel at least {figures.threshold:g}x faster than "
        f"{figures.against.value}: {s.passed}/{s.problems} pass -> {'ok' if figures.ok else 'FAILED'}",
        highlight=False,
    )
