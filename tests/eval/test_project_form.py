"""Project-form candidates end to end on CPU: a real g++ build by compile_candidate, the artifact materialized
into the candidate's sandbox, kernels called through cuda_agent.kernels, launches counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.compile import compile_candidate
from cuda_agent.contracts.candidate import HEADER_SUFFIXES, MODEL_NEW_FILE, CandidateForm, CandidateSource
from cuda_agent.contracts.common import CompileStatus, EvalStatus
from cuda_agent.contracts.compile import CompileRequest
from cuda_agent.contracts.eval import EvalRequest, EvalResult
from cuda_agent.eval import evaluate
from cuda_agent.eval.static_scan import scan_candidate
from tests.eval.helpers import EXAMPLES, RELU_ADD, codes, edit

pytestmark = pytest.mark.sandbox

CPU_CANDIDATE = EXAMPLES / "candidates" / "relu_add_cpu"


def project_files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def build_and_run(files: dict[str, str], problem: str = RELU_ADD, **fields: object) -> EvalResult:
    source = CandidateSource(form=CandidateForm.PROJECT, files=files)
    built = compile_candidate(CompileRequest(candidate=source, device="cpu"))
    assert built.status is CompileStatus.OK, built.message
    options: dict[str, object] = {"device": "cpu", "measure_baselines": False, "timing_trials": 12, "warmup": 2}
    options.update(fields)
    return evaluate(EvalRequest(problem_source=problem, candidate=source, artifact_key=built.artifact_key, **options))  # type: ignore[arg-type]


def test_example_project_candidate_is_clean_and_correct() -> None:
    files = project_files(CPU_CANDIDATE)
    assert scan_candidate(CandidateSource(form=CandidateForm.PROJECT, files=files)) == []
    result = build_and_run(files)
    assert result.status is EvalStatus.CORRECT, (result.message, result.findings)
    assert result.reward == 1.0 and result.trials_passed == 6


def test_project_candidate_that_never_launches_its_kernel() -> None:
    files = project_files(CPU_CANDIDATE)
    files["model_new.py"] = edit(
        files["model_new.py"], "self.kernels.relu_add(x, self.bias, out, x.numel(), self.bias.numel())", "out.zero_()"
    )
    result = build_and_run(files)
    assert result.status is EvalStatus.HACK_DETECTED
    assert "no_custom_kernel" in codes(result), result.findings


def test_project_candidate_launching_less_when_unguarded() -> None:
    """Kernel during the guarded correctness trials, PyTorch once timing starts."""
    files = project_files(CPU_CANDIDATE)
    files["model_new.py"] = edit(
        files["model_new.py"],
        "        x = x.contiguous()\n",
        "        self.calls = getattr(self, 'calls', 0) + 1\n"
        "        if self.calls > 8:\n            return torch.relu(x) + self.bias\n"
        "        x = x.contiguous()\n",
    )
    result = build_and_run(files)
    assert result.status is EvalStatus.HACK_DETECTED
    assert {"unguarded_behaviour_differs", "torch_compute_unguarded"} <= codes(result), result.findings


def test_project_candidate_without_artifact_is_not_blamed() -> None:
    source = CandidateSource(form=CandidateForm.PROJECT, files=project_files(CPU_CANDIDATE))
    result = evaluate(EvalRequest(problem_source=RELU_ADD, candidate=source, device="cpu"))
    assert result.status is EvalStatus.SANDBOX_ERROR and result.reward is None
    assert "compile it first" in result.message


# One header per allowed suffix, all included from the one .cpp unit (device cpu), one of them from a subfolder.
EVERY_HEADER = {
    ".h": "inline float relu(float v) { return v > 0.0f ? v : 0.0f; }\n",
    ".cuh": "inline long long column(long long i, long long cols) { return i % cols; }\n",
    ".hpp": "inline float add(float a, float b) { return a + b; }\n",
    ".inl": "inline void relu_add_row(const float* x, const float* bias, float* out, long long i, long long cols) {\n"
    "    out[i] = add(relu(x[i]), bias[column(i, cols)]);\n}\n",
}
EVERY_HEADER_UNIT = """#include "parts/relu.h"
#include "parts/column.cuh"
#include "parts/add.hpp"
#include "parts/row.inl"
extern "C" void relu_add(const float* x, const float* bias, float* out, long long n, long long cols) {
    for (long long i = 0; i < n; ++i) relu_add_row(x, bias, out, i, cols);
}
"""


def test_headers_of_every_allowed_suffix_compile_and_verify() -> None:
    """The build and the evaluation read one contract: a header the build accepts is never a -1 in evaluation."""
    assert set(EVERY_HEADER) == set(HEADER_SUFFIXES)  # a suffix added to the contract must be added here
    names = {".h": "relu", ".cuh": "column", ".hpp": "add", ".inl": "row"}
    files = {
        MODEL_NEW_FILE: project_files(CPU_CANDIDATE)[MODEL_NEW_FILE],
        "kernels/relu_add.cpp": EVERY_HEADER_UNIT,
        **{f"kernels/parts/{names[suffix]}{suffix}": text for suffix, text in EVERY_HEADER.items()},
    }
    result = build_and_run(files)
    assert result.status is EvalStatus.CORRECT, (result.message, result.findings)
    assert result.reward == 1.0


@pytest.mark.parametrize("name", ["kernels/relu_add.cc", "kernels/helper.py", "relu_add.cpp"])
def test_build_and_evaluation_refuse_a_file_outside_the_contract_alike(name: str) -> None:
    files = project_files(CPU_CANDIDATE)
    source = CandidateSource(form=CandidateForm.PROJECT, files={**files, name: files["kernels/relu_add.cpp"]})
    built = compile_candidate(CompileRequest(candidate=source, device="cpu"))
    evaluated = evaluate(EvalRequest(problem_source=RELU_ADD, candidate=source, device="cpu"))
    assert built.status is CompileStatus.COMPILE_ERROR and [d.code for d in built.diagnostics] == ["bad_layout"]
    assert evaluated.status is EvalStatus.RUNTIME_ERROR and evaluated.reward == -1
    assert name in built.message and evaluated.message == built.message
