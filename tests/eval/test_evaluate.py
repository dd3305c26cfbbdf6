"""End-to-end evaluations in the real sandbox on CPU: verdicts, bad input, and never a crash of the caller."""

from __future__ import annotations

import pytest

from cuda_agent.contracts.common import EvalStatus, TolerancePreset
from cuda_agent.eval.evaluate import HARNESS_VERSION
from tests.eval.helpers import HEADER, RELU_ADD, TRANSPOSE, TRANSPOSE_NEW, edit, module_new, run

pytestmark = pytest.mark.sandbox


def test_correct_candidate_with_fingerprint_and_timing() -> None:
    result = run(TRANSPOSE_NEW, timing_trials=15)
    assert result.status is EvalStatus.CORRECT, result.message
    assert result.correct and result.reward == 1.0 and result.fault is None
    assert result.trials_passed == result.trials_run == 4  # 3 fixed seeds + 1 unpredictable one
    assert result.max_abs_error == 0.0
    timing = result.candidate_timing
    assert timing is not None and timing.trials == 15 and len(timing.samples_ms) == 15 and timing.median_ms > 0
    fp = result.fingerprint
    assert fp is not None and fp.device == "cpu" and fp.harness_version == HARNESS_VERSION
    assert fp.tolerance is TolerancePreset.KERNELBENCH and fp.torch and fp.python


def test_wrong_values_are_incorrect() -> None:
    forward = (
        "out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)\n"
        "out.copy_(x.t()[:, [*range(1, x.shape[0]), 0]])\nreturn out"
    )
    result = run(module_new(forward), allow_torch_compute=True)
    assert result.status is EvalStatus.INCORRECT and result.reward == -1.0
    assert result.fault == "candidate" and result.trials_passed == 0
    assert "exceeds atol" in result.message and result.max_abs_error and result.max_abs_error > 0.1


# float32 rounds (x + 4096) to multiples of 2^-11: the reference's own error reaches 2.4e-4, over the kernelbench
# tolerance where |x| is small.
ROUNDING = (
    HEADER
    + """class Model(nn.Module):
    def forward(self, x):
        GUARD
        return (x + 4096.0) - 4096.0


def get_inputs():
    return [torch.randn(128, 64)]


def get_init_inputs():
    return []
"""
)


def test_a_candidate_more_accurate_than_the_reference_passes_against_a_float64_run() -> None:
    problem = ROUNDING.replace("GUARD", "pass")
    exact = run(module_new("return x.clone()"), problem, allow_torch_compute=True)
    assert exact.status is EvalStatus.CORRECT, exact.message
    assert "judged against a float64 run of the reference too" in exact.notes
    off = run(module_new("return x * 1.002"), problem, allow_torch_compute=True)
    assert off.status is EvalStatus.INCORRECT and "farther from a float64 run" in off.message
    # a reference that cannot run in float64 keeps the float32 verdict, and says why
    guarded = ROUNDING.replace("GUARD", "assert x.dtype == torch.float32, 'float32 only'")
    refused = run(module_new("return x.clone()"), guarded, allow_torch_compute=True)
    assert refused.status is EvalStatus.INCORRECT
    assert any("no float64 second opinion" in n and "float32 only" in n for n in refused.notes), refused.notes


def test_wrong_shape_and_dtype_are_incorrect() -> None:
    shape = run(module_new("return x.clone()"))
    assert shape.status is EvalStatus.INCORRECT and "output shape (256, 128) != expected (128, 256)" in shape.message
    dtype = run(module_new("return x.t().to(torch.float64)"))
    assert dtype.status is EvalStatus.INCORRECT and "dtype torch.float64" in dtype.message


def test_problem_without_get_inputs_is_the_problems_fault() -> None:
    problem = edit(TRANSPOSE, "def get_inputs():", "def not_inputs():")
    result = run(TRANSPOSE_NEW, problem)
    assert result.status is EvalStatus.SANDBOX_ERROR and result.reward is None and result.fault == "problem"
    assert "missing get_inputs" in result.message


def test_candidate_without_model_new() -> None:
    result = run("import torch\n\nclass Model(torch.nn.Module):\n    pass\n")
    assert result.status is EvalStatus.RUNTIME_ERROR and result.reward == -1.0
    assert "no ModelNew" in result.message


def test_candidate_syntax_error_names_the_line() -> None:
    result = run("import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n")
    assert result.status is EvalStatus.RUNTIME_ERROR
    assert "syntax error at line 3" in result.message


def test_exception_in_forward_names_the_line() -> None:
    result = run(module_new("raise ValueError('kernel config')"))
    assert result.status is EvalStatus.RUNTIME_ERROR
    assert "ValueError: kernel config" in result.message and "model_new.py line" in result.message


@pytest.mark.slow  # waits out the deadline
def test_infinite_loop_times_out_after_a_deadline_scaled_from_the_reference() -> None:
    """The deadline of one call is an allowance plus a multiple of the reference's time, well under the
    request's cap: a hung candidate is stopped in seconds, not after the cap."""
    result = run(module_new("while True:\n    pass"), timeout_s=60)
    assert result.status is EvalStatus.TIMEOUT and result.reward == -1.0
    assert "candidate exceeded its 15." in result.message and "s limit" in result.message
    assert result.duration_s < 50


def test_problem_too_large_is_refused_in_seconds_naming_the_sizes() -> None:
    """The memory plan (a meta-device pass) refuses a problem whose one trial cannot fit before allocating it."""
    problem = edit(TRANSPOSE, "rows = 256", "rows = 256 * 1024 * 1024")
    result = run(TRANSPOSE_NEW, problem)
    assert result.status is EvalStatus.SANDBOX_ERROR and result.reward is None and result.fault == "problem"
    assert result.message.startswith("problem too large for this host: one trial needs"), result.message
    assert "outputs 128.00 GiB" in result.message
    assert result.memory_plan["output_bytes"] == 128 * 1024**3
    # Refused as soon as the reference reported its plan: before the candidate's model exists, before any trial.
    assert "candidate.ready" not in result.timeline_s and "correctness" not in result.timeline_s
    assert result.duration_s - result.timeline_s["reference.ready"] < 5


def test_result_carries_memory_figures_and_writes_little_to_disk() -> None:
    result = run(TRANSPOSE_NEW)
    assert result.status is EvalStatus.CORRECT, result.message
    assert result.memory_plan["output_bytes"] == 128 * 256 * 4 and result.memory_plan["free_bytes"] > 0
    # Only the problem and the candidate's files: outputs never go through disk, whatever their size.
    assert result.disk_bytes_written is not None and result.disk_bytes_written < 64 * 1024
    assert {"reference.ready", "candidate.ready", "correctness", "candidate.timing"} <= set(result.timeline_s)


def test_huge_allocation_is_a_runtime_error() -> None:
    result = run(module_new("return torch.empty(100 * 1024**3, dtype=torch.uint8)"))
    assert result.status is EvalStatus.RUNTIME_ERROR, result.message
    assert "memory" in result.message.lower()


def test_crash_is_a_runtime_error() -> None:
    result = run(module_new("import os\nos.abort()"))
    assert result.status is EvalStatus.RUNTIME_ERROR, (result.message, result.findings)
    assert "signal 6" in result.message


def test_unknown_candidate_files_are_refused() -> None:
    from cuda_agent.contracts.candidate import CandidateSource
    from cuda_agent.contracts.eval import EvalRequest
    from cuda_agent.eval import evaluate

    source = CandidateSource(form="kernelbench", files={"model_new.py": TRANSPOSE_NEW, "torch.py": "x = 1"})
    result = evaluate(EvalRequest(problem_source=TRANSPOSE, candidate=source, device="cpu"))
    assert result.status is EvalStatus.RUNTIME_ERROR and "torch.py" in result.message


def test_cuda_request_on_a_host_without_gpu_is_an_infrastructure_fault() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    result = run(TRANSPOSE_NEW, device="cuda")
    assert result.status is EvalStatus.SANDBOX_ERROR and result.reward is None and result.fault == "infrastructure"


@pytest.mark.slow
def test_cpu_baselines_eager_and_compile_are_measured_and_cached() -> None:
    """relu_add with PyTorch compute allowed: timed against eager and torch.compile, the baselines cached."""
    candidate = edit(RELU_ADD, "class Model(", "class ModelNew(")
    first = run(candidate, RELU_ADD, allow_torch_compute=True, measure_baselines=True, timing_trials=20)
    assert first.status is EvalStatus.CORRECT, first.message
    assert first.eager_timing is not None and first.speedup_vs_eager is not None
    assert first.reward in (1.0, 2.0, 3.0)
    assert first.compile_timing is not None or any("compile" in n for n in first.notes)
    second = run(candidate, RELU_ADD, allow_torch_compute=True, measure_baselines=True, timing_trials=20)
    assert second.eager_timing == first.eager_timing  # served from the cache
    assert second.duration_s < first.duration_s
