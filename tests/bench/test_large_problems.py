"""The large problem set of issue 12 (examples/large): sizes at full scale on the meta device, and each problem
run for real on the CPU at a tiny scale. The CUDA candidates are checked on the GPU by the benchmark itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cuda_agent.bench.cases import BenchError, discover_cases, meta_sizes, pin_scale
from cuda_agent.problem import call_inputs, load_problem

LARGE = Path(__file__).resolve().parents[2] / "examples" / "large"
CASES = discover_cases(LARGE)
IDS = [case.name for case in CASES]
GB = 1e9


def test_the_set_covers_the_kinds_of_work_the_issue_names() -> None:
    assert len(CASES) >= 10
    names = set(IDS)
    for kind in ("gelu", "sum_dim1", "max_indices", "layernorm", "rmsnorm_bf16", "softmax", "gemm", "conv2d_bf16"):
        assert kind in names
    for case in CASES:
        assert list((case.candidate / "kernels").glob("*.cu")), f"{case.name}: no CUDA kernels"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_full_size_output_is_between_half_and_nine_gigabytes(case) -> None:
    sizes = meta_sizes(case.problem.read_text(), filename=str(case.problem))
    assert 0.5 * GB <= sizes.output_bytes <= 9 * GB, f"{case.name}: {sizes.output_bytes / GB:.2f} GB out"
    # One trial must fit next to its inputs and a reference output on the H200 (141 GB).
    assert sizes.input_bytes + 2 * sizes.output_bytes + sizes.parameter_bytes < 40 * GB


def test_the_multi_output_problem_returns_a_tuple() -> None:
    case = next(c for c in CASES if c.name == "max_indices")
    sizes = meta_sizes(case.problem.read_text())
    assert sizes.outputs == ["float32[67108864]", "int64[67108864]"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_runs_on_the_cpu_at_a_tiny_scale_with_finite_outputs(case) -> None:
    source = pin_scale(case.problem.read_text(), 1e-4, str(case.problem))
    assert "SCALE = 0.0001" in source
    expected = meta_sizes(source)
    problem = load_problem(source, name=f"large_{case.name}", filename=str(case.problem))
    torch.manual_seed(0)
    model = problem.model_cls(*call_inputs(problem.get_init_inputs, "get_init_inputs"))
    with torch.no_grad():
        out = model(*call_inputs(problem.get_inputs, "get_inputs"))
    outputs = list(out) if isinstance(out, tuple) else [out]
    assert sum(t.numel() * t.element_size() for t in outputs) == expected.output_bytes
    full = meta_sizes(case.problem.read_text())
    assert expected.output_bytes * 100 <= full.output_bytes  # the scale really shrinks the problem
    for t in outputs:
        assert not t.is_floating_point() or bool(torch.isfinite(t).all()), f"{case.name}: non-finite output"


def test_scale_needs_exactly_one_scale_line() -> None:
    assert pin_scale("x = 1\n", 1.0, "p.py") == "x = 1\n"  # full size: the source is sent as it is
    with pytest.raises(BenchError, match=r"p\.py: cannot scale"):
        pin_scale("x = 1\n", 0.5, "p.py")
    with pytest.raises(BenchError, match="scale must be in"):
        pin_scale("SCALE = 1.0\n", 2.0, "p.py")


def test_discovery_names_unknown_cases_and_empty_folders(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="no case named nope"):
        discover_cases(LARGE, ["nope"])
    with pytest.raises(BenchError, match="no case folders"):
        discover_cases(tmp_path)
    assert [c.name for c in discover_cases(LARGE, ["softmax", "gemm"])] == ["softmax", "gemm"]
