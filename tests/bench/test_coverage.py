"""`cuda-agent bench coverage`: the kernel author on composed problems it has never seen (CPU, nothing compiled)."""

from __future__ import annotations

import json
from pathlib import Path

from cuda_agent.bench.coverage import run_coverage
from tests.conftest import cli


def test_every_composed_problem_is_authored_or_gives_a_reason() -> None:
    figures = run_coverage(count=16, seed=3)
    assert 0 < figures.composed <= figures.drawn == 16
    assert figures.authored + sum(figures.unsupported.values()) == figures.composed
    assert sum(c for _, c in figures.by_op_count.values()) == figures.composed
    assert sum(a for a, _ in figures.by_op_count.values()) == figures.authored
    assert all(1 <= n <= 5 for n in figures.by_op_count)
    assert figures.share == figures.authored / figures.composed


def test_the_gate_fails_below_its_threshold(tmp_path: Path) -> None:
    out = tmp_path / "coverage.json"
    done = cli("bench", "coverage", "--count", "8", "--seed", "3", "--json", str(out))
    assert done.returncode == 0, done.stderr
    share = json.loads(out.read_text())["share"]
    assert f"({share:.1%}; seed 3, 8 drawn)" in done.stdout and "-> ok" in done.stdout
    done = cli("bench", "coverage", "--count", "8", "--seed", "3", "--threshold", "1")
    assert done.returncode == (0 if share == 1 else 1)
    assert ("-> ok" if share == 1 else "-> FAILED") in done.stdout
