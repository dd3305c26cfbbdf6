"""The workdir form on the GPU (H200): the four workspaces compile, verify correct and earn a reward under the
paper profile with the reference's weights loaded; torch operators from C++ or Python are refused with the rule;
the same kernels in the project form and in the workdir form get the same verdict and times within 3%.

The elementwise and reduction problems read 1 GiB (KernelBench sizes): at a few tens of microseconds per call, a
3% bound would compare launch overheads, not the kernels. All tests share one build cache (the precompiled torch
header is built once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.compile import compile_candidate
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource, RuleProfile, read_candidate_dir
from cuda_agent.contracts.common import CompileStatus, EvalStatus, TolerancePreset
from cuda_agent.contracts.compile import CompileRequest
from cuda_agent.contracts.eval import EvalRequest, EvalResult
from cuda_agent.eval import evaluate
from cuda_agent.workdir.convert import project_to_workdir
from tests.workdir.conftest import NAMES, problem, workspace

pytestmark = [pytest.mark.gpu, pytest.mark.sandbox, pytest.mark.usefixtures("shared_cache")]
PROJECTS = Path(__file__).parent / "projects"


def judge(candidate: CandidateSource, problem_source: str, **options: object) -> EvalResult:
    built = compile_candidate(CompileRequest(candidate=candidate))
    assert built.status is CompileStatus.OK, (built.message, built.log[-3000:])
    request = EvalRequest(
        problem_source=problem_source, candidate=candidate, artifact_key=built.artifact_key, **options
    )
    return evaluate(request)


@pytest.mark.parametrize("name", NAMES)
def test_workspace_is_correct_and_rewarded(name: str) -> None:
    result = judge(workspace(name), problem(name), load_reference_state=True, measure_baselines=True)
    assert result.status is EvalStatus.CORRECT, (result.message, result.findings)
    assert result.reward is not None and result.reward >= 1.0
    assert result.fingerprint is not None and result.fingerprint.tolerance is TolerancePreset.PAPER


def test_weight_transfer_names_mismatched_keys() -> None:
    files = dict(workspace("gemm_cublas").files)
    files["model_new.py"] = files["model_new.py"].replace("self.linear", "self.fc")
    result = judge(
        CandidateSource(form=CandidateForm.WORKDIR, files=files),
        problem("gemm_cublas"),
        load_reference_state=True,
        measure_baselines=False,
    )
    assert result.status is not EvalStatus.CORRECT
    assert "missing in ModelNew: linear.bias, linear.weight" in result.message, result.message


def test_torch_operator_in_cpp_is_refused_with_the_rule() -> None:
    files = dict(workspace("gemm_cublas").files)
    binding = files["kernels/linear_relu_binding.cpp"]
    files["kernels/linear_relu_binding.cpp"] = binding.replace("return y;", "return torch::relu(y);")
    result = judge(
        CandidateSource(form=CandidateForm.WORKDIR, files=files), problem("gemm_cublas"), measure_baselines=False
    )
    assert result.status is EvalStatus.HACK_DETECTED
    assert any(f.code == "static_paper_torch_operator" and "torch::relu" in f.message for f in result.findings)


def test_torch_operator_in_python_is_refused_with_the_rule() -> None:
    files = dict(workspace("elementwise").files)
    files["model_new.py"] = "import torch\n" + files["model_new.py"].replace(
        "return cuda_extension.silu_forward(x)",
        "return torch.sigmoid(x) * cuda_extension.silu_forward(x) / torch.sigmoid(x)",
    )
    result = judge(
        CandidateSource(form=CandidateForm.WORKDIR, files=files), problem("elementwise"), measure_baselines=False
    )
    assert result.status is EvalStatus.HACK_DETECTED
    assert any(f.code == "static_paper_torch_operator" and "torch.sigmoid" in f.message for f in result.findings)


@pytest.mark.parametrize("name", ["elementwise", "reduction"])
def test_same_kernels_same_verdict_and_time_in_both_forms(name: str) -> None:
    project = read_candidate_dir(PROJECTS / name, CandidateForm.PROJECT)
    options = {"rules": RuleProfile.PAPER, "measure_baselines": False, "timing_trials": 300}
    in_project = judge(project, problem(name), **options)
    in_workdir = judge(project_to_workdir(project), problem(name), **options)
    print(f"GPU-NOTE {name}: project {in_project.status} {in_project.candidate_timing}")
    print(f"GPU-NOTE {name}: workdir {in_workdir.status} {in_workdir.candidate_timing}")
    assert in_project.status is in_workdir.status is EvalStatus.CORRECT, (in_project.message, in_workdir.message)
    assert in_project.candidate_timing is not None and in_workdir.candidate_timing is not None
    a, b = in_project.candidate_timing.median_ms, in_workdir.candidate_timing.median_ms
    assert abs(a - b) / min(a, b) <= 0.03, (a, b)
