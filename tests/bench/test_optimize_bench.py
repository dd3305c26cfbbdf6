"""`cuda-agent bench optimize`: the optimize job on each problem of a folder, the table, the summary and the gate.

The end-to-end test runs the real command on two tiny CPU problems (tests/bench/data/optimize) with the
`heuristic` policy: real g++ builds, real sandboxed evaluations, the embedded job store. It asserts only what any
policy leaves in the job's result and trajectory, so it holds whichever author stands behind the name.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from cuda_agent.bench.cases import BenchError
from cuda_agent.bench.optimize_bench import (
    Against,
    OptimizeBenchFigures,
    OptimizeRow,
    discover_problems,
    passes,
    render,
    run_optimize_bench,
    summarize,
)
from cuda_agent.contracts.common import Device
from tests.conftest import cli

DATA = Path(__file__).parent / "data" / "optimize"


def row(name: str, *, eager: float | None = None, compile_: float | None = None, correct: bool = True) -> OptimizeRow:
    return OptimizeRow(
        problem=name,
        supported=correct or eager is not None,
        correct=correct,
        status="correct" if correct else "incorrect",
        speedup_vs_eager=eager,
        speedup_vs_compile=compile_,
        variants=2,
        wall_s=1.0,
    )


def table_rows(text: str) -> list[str]:
    """The problem cell of each body row of the rendered table (thirteen columns)."""
    return [line.split("│")[1].strip() for line in text.splitlines() if line.count("│") == 14]


def test_gate_needs_a_verified_kernel_at_the_threshold() -> None:
    fast = row("fast", eager=1.5, compile_=1.04)
    assert passes(fast, 1.05, Against.EAGER) and not passes(fast, 1.05, Against.COMPILE)
    assert passes(fast, 1.5, Against.EAGER)  # the threshold itself passes
    wrong = row("wrong", eager=9.0, compile_=9.0, correct=False)  # a wrong kernel's speedup does not count
    assert not passes(wrong, 1.0, Against.EAGER)
    no_compile = row("cpu", eager=2.0)  # no torch.compile baseline (CPU): cannot pass against compile
    assert not passes(no_compile, 0.0, Against.COMPILE)


def test_summary_shares_and_geomeans() -> None:
    rows = [
        row("a", eager=4.0, compile_=2.0),
        row("b", eager=1.0, compile_=0.5),
        row("c", eager=2.0, compile_=1.05),  # exactly 5% faster is not more than 5% faster
        row("d", eager=3.0, correct=False),
        OptimizeRow(problem="e", supported=False, correct=False, wall_s=0.1),
        row("f", eager=8.0, compile_=8.0),
    ]
    rows[1].confirmed, rows[5].confirmed = True, False  # f was wrong in its second evaluation: its speedup is void
    s = summarize(rows)
    assert (s.problems, s.supported_share, s.verified_share, s.confirmed) == (6, 5 / 6, 4 / 6, 1)
    assert s.faster_than_compile_share == 1 / 6
    assert s.geomean_vs_compile == pytest.approx(math.cbrt(2.0 * 0.5 * 1.05))
    assert s.geomean_vs_eager == pytest.approx(2.0)
    assert summarize([]).geomean_vs_eager is None


def test_render_prints_a_row_per_problem_and_the_outcome() -> None:
    figures = OptimizeBenchFigures(
        policy="heuristic", device=Device.CUDA, threshold=1.05, against=Against.COMPILE, time_budget_s=60
    )
    figures.rows = [row("fast", eager=3.0, compile_=1.2), row("slow", eager=1.1, compile_=0.9)]
    for r in figures.rows:
        r.passed = passes(r, figures.threshold, figures.against)
    console = Console(record=True, width=200)
    render(figures, console)
    text = console.export_text()
    assert table_rows(text) == ["fast", "slow"]
    assert "1.20x" in text and "0.90x" in text
    assert "gate: each problem needs a verified kernel at least 1.05x faster than compile: 1/2 pass -> FAILED" in text
    assert not figures.ok
    assert "timed on" not in text  # no row says which card timed it
    # rows resumed from device calls on different cards: how many each timed
    figures.rows[0].gpu = "NVIDIA H100 80GB HBM3"
    console = Console(record=True, width=200)
    render(figures, console)
    assert "timed on: NVIDIA H100 80GB HBM3 (1), not recorded (1)" in console.export_text()


def test_discover_problems(tmp_path: Path) -> None:
    assert [p.name for p in discover_problems(DATA)] == ["relu_rowsum.py", "scaled_tanh.py"]
    assert [p.name for p in discover_problems(DATA, ["scaled_tanh"])] == ["scaled_tanh.py"]
    with pytest.raises(BenchError, match="no problem named nope"):
        discover_problems(DATA, ["nope"])
    with pytest.raises(BenchError, match="no problem files"):
        discover_problems(tmp_path)


@pytest.mark.sandbox
@pytest.mark.slow
def test_bench_optimize_on_cpu_fails_a_threshold_no_kernel_meets(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = cli(
        *("bench", "optimize", "--problems", str(DATA), "--device", "cpu", "--policy", "heuristic"),
        *("--threshold", "1e9", "--time-budget-s", "300", "--json", str(out)),
        env={"CUDA_AGENT_DATA_DIR": str(tmp_path / "data")},
        timeout=900,
    )
    assert result.returncode == 1, result.stderr + result.stdout
    assert table_rows(result.stdout) == ["relu_rowsum", "scaled_tanh"], result.stdout
    assert "summary: 2 problems;" in result.stdout
    assert "at least 1e+09x faster than eager: 0/2 pass -> FAILED" in result.stdout

    figures = OptimizeBenchFigures.model_validate_json(out.read_text())
    assert json.loads(out.read_text())["summary"]["problems"] == 2
    rows = {r.problem: r for r in figures.rows}
    tanh = rows["scaled_tanh"]  # an elementwise chain: every kernel author in this project handles it
    assert tanh.supported and tanh.correct and tanh.status == "correct" and tanh.variants >= 1
    assert tanh.eager_ms is not None and tanh.ours_ms is not None and tanh.speedup_vs_eager is not None
    assert tanh.reward is not None and tanh.reward >= 1
    assert tanh.confirmed is True  # the job judged the returned kernel once more, on fresh seeds
    for r in figures.rows:
        assert not r.passed and r.wall_s > 0
        assert not r.correct or (r.supported and r.variants >= 1)
    assert figures.summary.verified_share == sum(r.correct for r in figures.rows) / 2


def test_bench_optimize_names_an_unknown_problem(tmp_path: Path) -> None:
    result = cli("bench", "optimize", "--problems", str(DATA), "--only", "nope", "--device", "cpu")
    assert result.returncode == 2
    assert "no problem named nope" in result.stderr and "scaled_tanh" in result.stderr


def test_resume_keeps_earlier_rows_and_optimizes_only_the_rest(tmp_path: Path) -> None:
    paths = discover_problems(DATA)
    earlier = OptimizeBenchFigures(
        policy="heuristic", device=Device.CPU, threshold=9.0, against=Against.EAGER, time_budget_s=60.0
    )
    earlier.rows = [row(p.stem, eager=2.0) for p in paths]
    said: list[str] = []
    figures = run_optimize_bench(
        paths, policy="heuristic", device=Device.CPU, threshold=1.5, time_budget_s=60.0, earlier=earlier,
        say=said.append,
    )  # fmt: skip
    # Every problem was measured earlier: nothing runs, and the gate is applied anew at this run's threshold.
    assert said == [f"resuming: {len(paths)} problems measured earlier, 0 left"]
    assert [r.problem for r in figures.rows] == [p.stem for p in paths] and figures.ok
    with pytest.raises(BenchError, match="resume with the same settings"):
        run_optimize_bench(paths, policy="heuristic", device=Device.CUDA, threshold=1.5, earlier=earlier)
    saved = tmp_path / "figures.json"
    saved.write_text(earlier.model_dump_json())
    result = cli(
        *("bench", "optimize", "--problems", str(DATA), "--device", "cpu", "--json", str(saved), "--resume"),
        env={"CUDA_AGENT_DATA_DIR": str(tmp_path / "data")},
    )  # the default budget differs from the earlier run's
    assert result.returncode == 2 and "resume with the same settings" in result.stderr, result.stderr


def test_redo_goes_with_resume(tmp_path: Path) -> None:
    result = cli("bench", "optimize", "--problems", str(DATA), "--device", "cpu", "--redo", "scaled_tanh")
    assert result.returncode == 2 and "--redo re-measures problems of an earlier run" in result.stderr


@pytest.mark.sandbox
@pytest.mark.slow
def test_redo_measures_a_kept_problem_again(tmp_path: Path) -> None:
    earlier = OptimizeBenchFigures(
        policy="heuristic", device=Device.CPU, threshold=1.05, against=Against.EAGER, time_budget_s=60.0
    )
    earlier.rows = [row(p.stem, eager=2.0) for p in discover_problems(DATA)]
    saved = tmp_path / "figures.json"
    saved.write_text(earlier.model_dump_json())
    result = cli(
        *("bench", "optimize", "--problems", str(DATA), "--device", "cpu", "--json", str(saved), "--resume"),
        *("--time-budget-s", "60", "--redo", "scaled_tanh"),
        env={"CUDA_AGENT_DATA_DIR": str(tmp_path / "data")},
        timeout=900,
    )
    said = result.stdout + result.stderr
    assert f"resuming: {len(earlier.rows) - 1} problems measured earlier, 1 left" in said, said
    rows = {r.problem: r for r in OptimizeBenchFigures.model_validate_json(saved.read_text()).rows}
    assert rows["scaled_tanh"].eager_ms is not None and rows["scaled_tanh"].correct  # measured now, not kept
    assert rows["relu_rowsum"].eager_ms is None and rows["relu_rowsum"].speedup_vs_eager == 2.0
