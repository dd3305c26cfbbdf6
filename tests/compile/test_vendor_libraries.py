"""Vendor libraries in PROJECT candidates: declared with #pragma comment(lib, ...), allow-listed, linked by real
nvcc builds in the sandbox, and never counted as the candidate's own kernel."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cuda_agent.compile import artifact_dir, compile_candidate
from cuda_agent.compile.libraries import ALLOWED_LIBRARIES
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource, read_candidate_dir
from cuda_agent.contracts.common import CompileStatus, Device
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.eval.static_scan import scan_candidate

pytestmark = pytest.mark.sandbox

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "candidates" / "linear_relu_cublas"
# The launcher's only work is a cuBLAS call: nothing of the candidate's own runs on the GPU.
LIBRARY_ONLY_CU = """#pragma comment(lib, "cublas")
#include <cublas_v2.h>

extern "C" int gemm(const float* a, const float* b, float* c, int n) {
  static cublasHandle_t h = nullptr;
  if (h == nullptr) cublasCreate(&h);
  const float one = 1.0f, zero = 0.0f;
  return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n);
}
"""
SCALE_CPP = """#pragma comment(lib, "cublas")
extern "C" void scale(const float* x, float* y, float a, int n) {
  for (int i = 0; i < n; ++i) y[i] = a * x[i];
}
"""


def build(kernels: dict[str, str], device: Device = Device.CUDA) -> CompileResult:
    files = {"model_new.py": "from cuda_agent.kernels import load_kernels\n", **kernels}
    source = CandidateSource(form=CandidateForm.PROJECT, files=files)
    return compile_candidate(CompileRequest(candidate=source, device=device))


def example_kernel() -> str:
    return (EXAMPLE / "kernels" / "linear_relu.cu").read_text()


def test_cublas_candidate_links_cublas_and_records_its_own_kernel() -> None:
    source = read_candidate_dir(EXAMPLE)
    assert scan_candidate(source) == []
    result = compile_candidate(CompileRequest(candidate=source, device=Device.CUDA))
    assert result.status is CompileStatus.OK, (result.message, result.log[-2000:])
    assert [r.kernel for r in result.resources] == ["bias_relu_kernel"]
    kernels = artifact_dir(result.cache_key) / "kernels"
    dynamic = subprocess.run(["readelf", "-d", str(kernels / "libkernels.so")], capture_output=True, text=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert any(n.startswith("libcublas.so") for n in needed), needed
    assert "(RUNPATH)" in dynamic  # the evaluation child finds the library without LD_LIBRARY_PATH
    manifest = json.loads((kernels / "manifest.json").read_text())
    assert manifest["libraries"] == ["cublas"]
    assert manifest["kernel_units"] == ["kernels/linear_relu.cu"]
    assert [f["name"] for f in manifest["functions"]] == ["linear_relu"]


def test_library_outside_the_allow_list_is_refused() -> None:
    result = build({"kernels/k.cu": example_kernel().replace('lib, "cublas"', 'lib, "nccl"')})
    assert result.status is CompileStatus.COMPILE_ERROR and "'nccl' is not allowed" in result.message
    refused, undeclared = result.diagnostics  # and cublas_v2.h, included on line 3, is left without its library
    assert refused.code == "bad_library" and (refused.file, refused.line) == ("kernels/k.cu", 2)
    assert all(name in refused.message for name in ALLOWED_LIBRARIES)
    assert undeclared.code == "bad_library" and undeclared.line == 3


def test_vendor_header_without_declaration_says_what_to_declare() -> None:
    result = build({"kernels/k.cu": example_kernel().replace('#pragma comment(lib, "cublas")', "")})
    assert result.status is CompileStatus.COMPILE_ERROR
    (diag,) = result.diagnostics
    assert diag.code == "bad_library" and diag.line == 3
    assert '#pragma comment(lib, "cublas")' in diag.message


def test_declaration_in_a_comment_declares_nothing() -> None:
    result = build({"kernels/k.cu": LIBRARY_ONLY_CU.replace('#pragma comment(lib, "cublas")', "// lib: cublas")})
    assert result.status is CompileStatus.COMPILE_ERROR
    assert [d.code for d in result.diagnostics] == ["bad_library"]  # the header still needs the declaration


def test_library_only_candidate_is_refused() -> None:
    result = build({"kernels/gemm.cu": LIBRARY_ONLY_CU})
    assert result.status is CompileStatus.COMPILE_ERROR
    (diag,) = result.diagnostics
    assert diag.code == "no_custom_kernel" and "__global__" in diag.message
    assert not result.artifact_key


def test_own_kernel_in_another_unit_satisfies_the_rule() -> None:
    """The rule is per candidate: the library call and the kernel may live in different units."""
    own = "#include <cuda_runtime.h>\n__global__ void fill(float* y) { y[threadIdx.x] = 1.0f; }\n"
    own += 'extern "C" void fill_one(float* y, cudaStream_t s) { fill<<<1, 32, 0, s>>>(y); }\n'
    result = build({"kernels/gemm.cu": LIBRARY_ONLY_CU, "kernels/fill.cu": own})
    assert result.status is CompileStatus.OK, result.message
    manifest = json.loads((artifact_dir(result.cache_key) / "kernels" / "manifest.json").read_text())
    assert manifest["kernel_units"] == ["kernels/fill.cu"]


def test_cpu_candidate_declaring_cublas_is_refused() -> None:
    result = build({"kernels/scale.cpp": SCALE_CPP}, device=Device.CPU)
    assert result.status is CompileStatus.COMPILE_ERROR
    (diag,) = result.diagnostics
    assert diag.code == "bad_library" and "device cpu" in diag.message and "cublas" in diag.message
    assert build(
        {"kernels/scale.cpp": SCALE_CPP.replace('#pragma comment(lib, "cublas")\n', "")}, Device.CPU
    ).status is (CompileStatus.OK)


def test_torch_headers_stay_refused_next_to_vendor_headers() -> None:
    kernel = example_kernel().replace("#include <cuda_runtime.h>", "#include <ATen/ATen.h>")
    result = build({"kernels/k.cu": kernel})
    assert result.status is CompileStatus.COMPILE_ERROR
    (diag,) = result.diagnostics  # <cublas_v2.h> on the line before is fine: its library is declared
    assert diag.code == "forbidden_include" and diag.line == 4 and "without torch" in diag.message
