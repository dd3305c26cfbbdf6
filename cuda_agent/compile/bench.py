"""Compile-latency benchmark: the PROJECT fast path against load_inline and the bare ``nvcc -cubin`` floor."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from cuda_agent.compile.builder import compile_candidate
from cuda_agent.compile.toolchain import nvcc_path, resolve_arch
from cuda_agent.contracts.candidate import MODEL_NEW_FILE, CandidateForm, CandidateSource
from cuda_agent.contracts.common import CompileStatus
from cuda_agent.contracts.compile import CompileRequest
from cuda_agent.settings import get_settings

_KERNEL = """
__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
"""
_LAUNCHER = """
extern "C" void add(const float* a, const float* b, float* c, int n, cudaStream_t stream) {
  add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n);
}
"""
_INLINE_CUDA = """
#include <torch/extension.h>
__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
  auto c = torch::empty_like(a);
  int n = a.numel();
  add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
  return c;
}
"""


def _timed(fn: Any) -> tuple[float, Any]:
    t0 = time.monotonic()
    out = fn()
    return time.monotonic() - t0, out


def run_compile_benchmark(include_load_inline: bool = True) -> dict[str, Any]:
    """Seconds for: the nvcc -cubin floor, a cold fast-path build, a cache hit, and load_inline (cold).

    Builds use a fresh marker in the source so nothing comes from an earlier run's cache.
    """
    marker = f"// bench {time.time_ns()}\n"
    arch = resolve_arch(None)
    figures: dict[str, Any] = {"arch": arch, "data_dir": str(get_settings().data_dir)}
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "k.cu"
        cu.write_text(marker + _KERNEL)
        num = arch.removeprefix("sm_")
        argv = [str(nvcc_path()), "-cubin", f"-arch=sm_{num}", str(cu), "-o", str(Path(tmp) / "k.cubin")]
        figures["nvcc_cubin_floor_s"], proc = _timed(lambda: subprocess.run(argv, capture_output=True, check=False))
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc -cubin failed: {proc.stderr.decode()[-500:]}")

    files = {
        MODEL_NEW_FILE: "from cuda_agent.kernels import load_kernels\n",
        "kernels/add.cu": marker + "#include <cuda_runtime.h>\n" + _KERNEL + _LAUNCHER,
    }
    req = CompileRequest(candidate=CandidateSource(form=CandidateForm.PROJECT, files=files))
    figures["fast_path_cold_s"], cold = _timed(lambda: compile_candidate(req))
    if cold.status is not CompileStatus.OK:
        raise RuntimeError(f"fast path build failed: {cold.message}")
    figures["cache_hit_s"], hit = _timed(lambda: compile_candidate(req))
    assert hit.cache_hit
    edited = req.model_copy(deep=True)
    edited.candidate.files[MODEL_NEW_FILE] += "# edit\n"
    figures["fast_path_relink_s"], _ = _timed(lambda: compile_candidate(edited))

    if include_load_inline:
        src = (
            f"from torch.utils.cpp_extension import load_inline\n"
            f"ext = load_inline(name='bench_add', cpp_sources='torch::Tensor add(torch::Tensor a, "
            f"torch::Tensor b);', cuda_sources={(marker + _INLINE_CUDA)!r}, functions=['add'])\n"
        )
        kb = CompileRequest(candidate=CandidateSource(form=CandidateForm.KERNELBENCH, files={MODEL_NEW_FILE: src}))
        figures["load_inline_cold_s"], inline = _timed(lambda: compile_candidate(kb))
        if inline.status is not CompileStatus.OK:
            raise RuntimeError(f"load_inline build failed: {inline.message}")
    floor = figures["nvcc_cubin_floor_s"]
    figures["fast_path_over_floor"] = figures["fast_path_cold_s"] / floor
    return figures
