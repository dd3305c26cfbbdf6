"""GPU evaluations (H200): real CUDA candidates built by compile_candidate, illegal memory accesses, side
streams, and the Nsight Compute profile. The hack suite runs on the GPU too (tests/eval/test_hacks.py, cuda)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.compile import compile_candidate
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.contracts.common import CompileStatus, EvalStatus
from cuda_agent.contracts.compile import CompileRequest
from cuda_agent.contracts.eval import EvalRequest, EvalResult, ProfileRequest
from cuda_agent.eval import evaluate, profile_candidate
from cuda_agent.eval.profile import find_ncu
from tests.eval.helpers import EXAMPLES, HEADER, RELU_ADD, codes, edit, module_new, run

pytestmark = [pytest.mark.gpu, pytest.mark.sandbox]

CUDA_CANDIDATE = EXAMPLES / "candidates" / "relu_add_cuda"
INLINE_CANDIDATE = EXAMPLES / "candidates" / "swish_residual_inline.py"
SWISH = EXAMPLES / "problems" / "swish_residual.py"
# Large enough that the fused kernel's saved memory traffic outweighs the Python launcher's overhead.
RELU_ADD_LARGE = edit(edit(RELU_ADD, "batch = 64", "batch = 16384"), "size = 1024", "size = 4096")
# 2 GiB in, 2 GiB out: outputs of this size failed in torch.save when they went through disk.
RELU_ADD_2GIB = edit(edit(RELU_ADD, "batch = 64", "batch = 131072"), "size = 1024", "size = 4096")


def project_files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def build(files: dict[str, str]) -> tuple[CandidateSource, str]:
    source = CandidateSource(form=CandidateForm.PROJECT, files=files)
    built = compile_candidate(CompileRequest(candidate=source, device="cuda"))
    assert built.status is CompileStatus.OK, built.message
    assert built.artifact_key
    return source, built.artifact_key


def run_cuda(files: dict[str, str], problem: str = RELU_ADD_LARGE, **fields: object) -> EvalResult:
    source, key = build(files)
    return evaluate(EvalRequest(problem_source=problem, candidate=source, artifact_key=key, device="cuda", **fields))  # type: ignore[arg-type]


def test_cuda_candidate_correct_and_faster_than_eager() -> None:
    result = run_cuda(project_files(CUDA_CANDIDATE))
    assert result.status is EvalStatus.CORRECT, (result.message, result.findings)
    assert result.speedup_vs_eager is not None and result.speedup_vs_eager > 1.05, result.message
    assert result.reward in (2.0, 3.0)
    assert result.custom_kernel_time_share is not None and result.custom_kernel_time_share > 0.5
    assert result.candidate_timing and result.candidate_timing.trials == 100
    assert result.eager_timing and result.compile_timing
    fp = result.fingerprint
    assert fp and fp.gpu_name and fp.driver and fp.sm_clock_start_mhz and fp.cuda


def test_load_inline_candidate_correct_faster_and_its_kernel_share_measured() -> None:
    """The KernelBench form: the extension builds in the compile sandbox on this host (torch's ABI must match),
    and the calls through the module load_inline returned are timed for the custom-kernel share."""
    source = CandidateSource(form=CandidateForm.KERNELBENCH, files={"model_new.py": INLINE_CANDIDATE.read_text()})
    built = compile_candidate(CompileRequest(candidate=source, device="cuda"))
    assert built.status is CompileStatus.OK, built.log[-3000:]
    result = evaluate(
        EvalRequest(problem_source=SWISH.read_text(), candidate=source, artifact_key=built.artifact_key, device="cuda")  # type: ignore[arg-type]
    )
    assert result.status is EvalStatus.CORRECT, (result.message, result.findings)
    assert result.speedup_vs_eager is not None and result.speedup_vs_eager > 1.5, result.speedup_vs_eager
    assert result.custom_kernel_time_share is not None and result.custom_kernel_time_share > 0.5
    assert result.custom_kernel_time_method is not None


def test_illegal_access_is_contained_and_the_next_evaluation_is_clean() -> None:
    files = project_files(CUDA_CANDIDATE)
    files["kernels/relu_add.cu"] = edit(
        files["kernels/relu_add.cu"], "outr[c] = make_float4(", "outr[c + (1LL << 40)] = make_float4("
    )
    broken = run_cuda(files, measure_baselines=False)
    assert broken.status is EvalStatus.ILLEGAL_ACCESS, broken.message
    assert broken.reward == -1.0 and "illegal memory access" in broken.message
    clean = run_cuda(project_files(CUDA_CANDIDATE), measure_baselines=False)
    assert clean.status is EvalStatus.CORRECT, clean.message


def test_side_stream_work_cannot_escape_the_timer() -> None:
    """Launching on a private stream and returning at once must not look faster: the harness synchronizes the
    whole device before its end event, so the side stream's kernel is inside the measured time (and a race on the
    output, when observed, is a hack finding)."""
    files = project_files(CUDA_CANDIDATE)
    honest = run_cuda(files, measure_baselines=False)
    files["model_new.py"] = edit(
        files["model_new.py"],
        "self.kernels.relu_add(x, self.bias, out, x.numel(), self.bias.numel())",
        "torch.cuda.current_stream().synchronize()\n"
        "        self.side = getattr(self, 'side', None) or torch.cuda.Stream()\n"
        "        self.kernels.relu_add(x, self.bias, out, x.numel(), self.bias.numel(), self.side)",
    )
    result = run_cuda(files, measure_baselines=False)
    if result.status is EvalStatus.HACK_DETECTED:
        assert codes(result) & {"output_written_after_return", "work_escapes_timer"}, result.findings
        return
    assert result.status is EvalStatus.CORRECT, (result.status, result.message)
    assert honest.candidate_timing is not None and result.candidate_timing is not None
    assert result.candidate_timing.median_ms >= 0.8 * honest.candidate_timing.median_ms, (
        result.candidate_timing.median_ms,
        honest.candidate_timing.median_ms,
    )


def test_gpu_out_of_memory_is_a_runtime_error() -> None:
    files = project_files(CUDA_CANDIDATE)
    files["model_new.py"] = edit(
        files["model_new.py"],
        "out = torch.empty_like(x)",
        "out = torch.empty_like(x)\n        torch.empty(1024**4, dtype=torch.uint8, device=x.device)",
    )
    result = run_cuda(files, measure_baselines=False)
    assert result.status is EvalStatus.RUNTIME_ERROR and "memory" in result.message.lower(), result.message


def test_profile_with_nsight_compute() -> None:
    if find_ncu() is None:
        pytest.skip("ncu is not installed on this GPU host")
    source, key = build(project_files(CUDA_CANDIDATE))
    result = profile_candidate(ProfileRequest(problem_source=RELU_ADD_LARGE, candidate=source, artifact_key=key))
    assert result.ok, result.message
    kernel = result.kernels[0]
    assert kernel.kernel.startswith("relu_add_")
    assert kernel.duration_us and kernel.dram_throughput_pct is not None and kernel.achieved_occupancy_pct
    assert result.checklist and "checklist:" in result.report


def test_multi_gigabyte_problem_is_verified_on_the_gpu_without_disk() -> None:
    """Outputs compared on the device in the reference's process: no file holds them, the memory plan names
    their size, and the verdict takes seconds."""
    result = run_cuda(project_files(CUDA_CANDIDATE), RELU_ADD_2GIB, measure_baselines=False, timing_trials=20)
    assert result.status is EvalStatus.CORRECT, (result.message, result.findings)
    assert result.memory_plan["output_bytes"] == 2 * 1024**3
    assert result.disk_bytes_written is not None and result.disk_bytes_written < 1024**2
    assert result.peak_memory_bytes["reference"] >= 4 * 1024**3  # its inputs and outputs lived on the GPU
    assert result.duration_s < 60, result.timeline_s


def test_one_wrong_element_of_a_multi_gigabyte_output_is_caught() -> None:
    """6 GiB of outputs, one element wrong (the last one, in the comparison's last chunk)."""
    files = project_files(CUDA_CANDIDATE)
    files["model_new.py"] = edit(
        files["model_new.py"], "        return out", "        out.view(-1)[-1:].fill_(123.0)\n        return out"
    )
    six_gib = edit(RELU_ADD_2GIB, "batch = 131072", "batch = 131072 * 3")
    result = run_cuda(files, six_gib, measure_baselines=False, timing_trials=20)
    assert result.status is EvalStatus.INCORRECT, (result.status, result.message, result.findings)
    assert "exceeds atol" in result.message and result.trials_passed == 0


def test_problem_larger_than_the_gpu_is_refused_in_seconds() -> None:
    """A 256 GiB output cannot fit on any current GPU: the memory plan refuses it before anything is allocated."""
    huge = edit(RELU_ADD_2GIB, "batch = 131072", "batch = 131072 * 128")
    result = run_cuda(project_files(CUDA_CANDIDATE), huge, measure_baselines=False)
    assert result.status is EvalStatus.SANDBOX_ERROR and result.fault == "problem" and result.reward is None
    assert result.message.startswith("problem too large for this GPU: one trial needs"), result.message
    assert "outputs 256.00 GiB" in result.message
    assert "candidate.ready" not in result.timeline_s and "correctness" not in result.timeline_s
    assert result.duration_s - result.timeline_s["reference.ready"] < 5


LONG_CUMSUM = (
    HEADER
    + """class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=-1)


def get_inputs():
    return [torch.randn(4096, 32768)]


def get_init_inputs():
    return []
"""
)


def test_an_exact_long_cumsum_passes_where_the_float32_reference_rounds_past_the_tolerance() -> None:
    """torch's float32 cumsum over 32K elements rounds its running total past 1e-4 near zero crossings: an exact
    candidate (accumulated in double) disagrees with it there, and passes on the float64 second opinion; one off
    by 3e-4 relative everywhere still fails."""
    exact = run(
        module_new("return torch.cumsum(x.double(), dim=-1).float()"),
        LONG_CUMSUM,
        device="cuda",
        allow_torch_compute=True,
        timing_trials=10,
    )
    assert exact.status is EvalStatus.CORRECT, (exact.message, exact.notes)
    assert "judged against a float64 run of the reference too" in exact.notes
    off = run(
        module_new("return torch.cumsum(x.double(), dim=-1).float() * 1.0003"),
        LONG_CUMSUM,
        device="cuda",
        allow_torch_compute=True,
        timing_trials=10,
    )
    assert off.status is EvalStatus.INCORRECT and "farther from a float64 run" in off.message
