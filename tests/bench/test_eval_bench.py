"""The benchmark's floor loop, acceptance and table on a small CPU example (a real g++ build of
examples/candidates/relu_add_cpu), and the whole `cuda-agent bench eval` on the CPU device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from cuda_agent.bench.eval_bench import BenchFigures, CaseFigures, VerdictFigures, judge, render
from cuda_agent.bench.floor import FloorFigures, FloorRequest, run_floor
from cuda_agent.bench.monitor import ResourceFigures
from cuda_agent.compile import CandidateRuntime, compile_candidate, materialize_artifact
from cuda_agent.contracts.candidate import CandidateSource, read_candidate
from cuda_agent.contracts.common import CompileStatus, Device, TolerancePreset
from cuda_agent.contracts.compile import CompileRequest

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "examples" / "problems" / "relu_add.py"
CANDIDATE = ROOT / "examples" / "candidates" / "relu_add_cpu"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[CandidateSource, CandidateRuntime]:
    candidate = read_candidate(CANDIDATE)
    result = compile_candidate(CompileRequest(candidate=candidate, device=Device.CPU))
    assert result.status is CompileStatus.OK and result.artifact_key, result.message
    return candidate, materialize_artifact(result.artifact_key, tmp_path_factory.mktemp("runtime"))


def floor_of(model_new: str, runtime: CandidateRuntime) -> FloorFigures:
    request = FloorRequest(problem_source=PROBLEM.read_text(), model_new=model_new, device="cpu", timing_trials=20)
    return run_floor(request, runtime.env, timeout_s=300)


def test_floor_checks_then_times_the_candidate(built: tuple[CandidateSource, CandidateRuntime]) -> None:
    candidate, runtime = built
    floor = floor_of(candidate.model_new, runtime)
    assert floor.error is None
    assert floor.correct is True and floor.trials_passed == 5 and floor.failure is None
    assert floor.candidate_median_ms is not None and 0 < floor.candidate_min_ms <= floor.candidate_median_ms
    assert floor.setup_s + floor.correctness_s + floor.timing_s <= floor.floor_s < floor.process_wall_s
    assert floor.gpu_peak_allocated_bytes is None  # host timing on the CPU


def test_floor_catches_a_candidate_off_by_more_than_the_tolerance(
    built: tuple[CandidateSource, CandidateRuntime],
) -> None:
    candidate, runtime = built
    # Same kernels, a bias 1e-3 off: fails float32's 1e-4 tolerance, and is then not timed.
    wrong = candidate.model_new.replace("torch.randn(size))", "torch.randn(size) + 1e-3)")
    assert wrong != candidate.model_new
    floor = floor_of(wrong, runtime)
    assert floor.error is None and floor.correct is False and floor.trials_passed == 0
    assert floor.failure is not None and "not allclose at 0.0001" in floor.failure
    assert floor.timing_s == 0.0 and floor.candidate_median_ms is None


def test_floor_reports_a_candidate_that_raises(built: tuple[CandidateSource, CandidateRuntime]) -> None:
    candidate, runtime = built
    broken = candidate.model_new.replace("x = x.contiguous()", "raise RuntimeError('kernel exploded')")
    floor = floor_of(broken, runtime)
    assert floor.error is not None and "kernel exploded" in floor.error


def verdict(wall_s: float, correct: bool = True) -> VerdictFigures:
    return VerdictFigures(
        wall_s=wall_s,
        baselines_cached=True,
        status="correct" if correct else "incorrect",
        correct=correct,
        reward=1.0 if correct else -1.0,
        speedup_vs_eager=0.5,
        speedup_vs_compile=0.25,
        candidate_median_ms=1.0,
        eager_median_ms=0.5,
        compile_median_ms=0.25,
        max_abs_error=0.0,
        message="",
        findings=[],
        notes=[],
        timeline_s={"children_taken": 0.1, "verdict": wall_s},
        resources=ResourceFigures(host_rss_peak_bytes=3 * 10**9, disk_used_growth_peak_bytes=5 * 10**6),
        result={},
    )


def test_acceptance_is_one_and_a_half_floors_plus_two_seconds() -> None:
    floor = FloorFigures(floor_s=4.0, correct=True, trials_passed=5)
    case = CaseFigures(name="p", problem="p.py", candidate="c", floor=floor, verdicts=[verdict(30.0), verdict(8.0)])
    assert judge(case).ok and judge(case).limit_s == pytest.approx(8.0) and judge(case).verdict_s == 8.0
    case.verdicts[-1] = verdict(8.01)
    assert judge(case).reasons == ["verdict 8.01 s > 8.00 s"]
    case.verdicts[-1] = verdict(1.0, correct=False)
    assert "the verdict and the floor's allclose disagree" in judge(case).reasons
    case.verdicts = case.verdicts[:1]
    case.verdicts[0] = case.verdicts[0].model_copy(update={"baselines_cached": False})
    assert "no verdict with cached baselines" in judge(case).reasons


def test_table_shows_each_case_with_its_figures() -> None:
    floor = FloorFigures(floor_s=4.0, setup_s=1.0, correctness_s=1.0, timing_s=2.0, correct=True, trials_passed=5)
    ok = CaseFigures(name="fast_one", problem="a.py", candidate="a", floor=floor, verdicts=[verdict(9.0), verdict(7.5)])
    slow = CaseFigures(name="slow_one", problem="b.py", candidate="b", floor=floor, verdicts=[verdict(9), verdict(9)])
    broken = CaseFigures(name="broken_one", problem="c.py", candidate="c", error="compile error: no launcher")
    ok.verdicts[-1].result = {"peak_memory_bytes": {"reference": 2 * 10**9}, "disk_bytes_written": 3 * 10**6}
    for case in (ok, slow, broken):
        case.acceptance = judge(case)
    figures = BenchFigures(
        started_at="now",
        device=Device.CPU,
        gpu=None,
        scale=1.0,
        repeats=1,
        tolerance=TolerancePreset.KERNELBENCH,
        warm_children=2,
        cases=[ok, slow, broken],
    )
    console = Console(record=True, width=250)
    render(figures, console)
    text = console.export_text()
    row = next(line for line in text.splitlines() if "fast_one" in line and "correct" in line)
    assert "7.50" in row and "8.00" in row and "yes" in row and "3.00" in row and "5.0" in row
    assert "not accepted: verdict 9.00 s > 8.00 s" in text
    assert "not accepted: compile error: no launcher" in text
    assert "where the time went (s since the call): children_taken 0.10, verdict 7.50" in text
    assert "the harness's own figures: peak torch memory reference 2.00 GB, child directories 3.0 MB" in text
    assert not figures.ok


@pytest.mark.slow
@pytest.mark.sandbox
def test_bench_eval_command_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    argv = ["bench", "eval", "--problem", str(PROBLEM), "--candidate", str(CANDIDATE), "--device", "cpu"]
    proc = subprocess.run(
        [sys.executable, "-m", "cuda_agent.cli", *argv, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    figures = json.loads(out.read_text())
    (case,) = figures["cases"]
    first, cached = case["verdicts"]
    assert not first["baselines_cached"] and cached["baselines_cached"]
    assert cached["status"] == "correct" and cached["reward"] is not None
    assert case["floor"]["correct"] is True
    assert cached["resources"]["host_rss_peak_bytes"] > 0 and cached["resources"]["samples"] > 0
    assert cached["timeline_s"]
    # The exit status is the acceptance: on a small shared CPU the verdict may miss the floor's limit.
    accepted = cached["wall_s"] <= case["acceptance"]["limit_s"]
    assert case["acceptance"]["ok"] is accepted and proc.returncode == (0 if accepted else 1), proc.stderr[-2000:]
    assert "relu_add" in proc.stdout and "where the time went" in proc.stdout
