"""The workdir form without building: reading a workspace, its layout rules, the paper profile's static rules and
request resolution, weight transfer, conversion, and the agent environment presenting the form."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from cuda_agent.agent.environment import KernelEnv, render_skill
from cuda_agent.contracts.agent import RolloutConfig
from cuda_agent.contracts.candidate import (
    CandidateForm,
    CandidateSource,
    RuleProfile,
    layout_error,
    read_candidate,
    read_candidate_dir,
)
from cuda_agent.contracts.common import TolerancePreset
from cuda_agent.contracts.eval import EvalRequest
from cuda_agent.eval.static_scan import paper_python, scan_candidate
from cuda_agent.workdir.convert import (
    GENERATED_BINDING,
    ConversionError,
    project_to_workdir,
    workdir_to_project,
    write_workspace,
)
from cuda_agent.workdir.layout import PLATFORM_FILES
from cuda_agent.workdir.weights import WeightTransferError, transfer_state
from tests.workdir.conftest import NAMES, WORKSPACES, problem, workspace

PROJECTS = Path(__file__).parent / "projects"


def released_layout(tmp_path: Path, name: str) -> Path:
    """A workspace as the released environment leaves it: its own binding files, the reference, utils/."""
    root = tmp_path / name
    shutil.copytree(WORKSPACES / name, root)
    (root / "binding.cpp").write_text("// the environment's copy: never built here\n")
    (root / "binding_registry.h").write_text("#error never built here\n")
    (root / "utils").mkdir()
    (root / "utils" / "compile.py").write_text("print('theirs')\n")
    return root


def test_a_released_workspace_reads_as_workdir_without_platform_files(tmp_path: Path) -> None:
    root = released_layout(tmp_path, "gemm_cublas")
    candidate = read_candidate(root)  # form inferred from the layout
    assert candidate.form is CandidateForm.WORKDIR
    assert sorted(candidate.files) == [
        "kernels/bias_relu.cu",
        "kernels/gemm.cpp",
        "kernels/linear_relu_binding.cpp",
        "model_new.py",
    ]
    assert layout_error(candidate) is None
    # Without the binding files, importing cuda_extension is what says workdir.
    assert read_candidate(WORKSPACES / "elementwise").form is CandidateForm.WORKDIR


def test_platform_files_from_a_candidate_are_refused() -> None:
    files = {**workspace("elementwise").files, "binding.cpp": "PYBIND11_MODULE(x, m) {}"}
    problem_text = layout_error(CandidateSource(form=CandidateForm.WORKDIR, files=files))
    assert problem_text is not None and "binding.cpp is supplied by the platform" in problem_text
    stray = {**workspace("elementwise").files, "utils/compile.py": ""}
    assert "utils/compile.py" in (layout_error(CandidateSource(form=CandidateForm.WORKDIR, files=stray)) or "")


def test_workdir_requests_resolve_to_the_paper_profile() -> None:
    candidate = workspace("elementwise")
    request = EvalRequest(problem_source=problem("elementwise"), candidate=candidate)
    assert (request.rules, request.tolerance) == (RuleProfile.PAPER, TolerancePreset.PAPER)
    project = CandidateSource(form=CandidateForm.PROJECT, files={"model_new.py": "", "kernels/a.cu": ""})
    standard = EvalRequest(problem_source="", candidate=project)
    assert (standard.rules, standard.tolerance) == (RuleProfile.STANDARD, TolerancePreset.KERNELBENCH)
    paper_project = EvalRequest(problem_source="", candidate=project, rules=RuleProfile.PAPER)
    assert paper_project.tolerance is TolerancePreset.PAPER
    with pytest.raises(ValidationError, match="rules 'paper' judge at the paper tolerance"):
        EvalRequest(problem_source="", candidate=candidate, tolerance=TolerancePreset.STRICT)
    with pytest.raises(ValidationError, match="forbid PyTorch compute"):
        EvalRequest(problem_source="", candidate=candidate, allow_torch_compute=True)


@pytest.mark.parametrize("name", NAMES)
def test_the_written_workspaces_keep_the_paper_rules(name: str) -> None:
    assert scan_candidate(workspace(name), RuleProfile.PAPER) == []


def with_file(name: str, path: str, text: str) -> CandidateSource:
    files = {**workspace(name).files, path: text}
    return CandidateSource(form=CandidateForm.WORKDIR, files=files)


def codes(candidate: CandidateSource, rules: RuleProfile = RuleProfile.PAPER) -> dict[str, str]:
    return {f.code: f.message for f in scan_candidate(candidate, rules)}


def test_a_torch_operator_in_cpp_is_refused_naming_the_rule() -> None:
    binding = workspace("gemm_cublas").files["kernels/linear_relu_binding.cpp"]
    cheat = binding.replace("  bias_relu_launcher(", "  y = torch::relu(y + b);\n  bias_relu_launcher(")
    found = codes(with_file("gemm_cublas", "kernels/linear_relu_binding.cpp", cheat))
    message = found["static_paper_torch_operator"]
    assert "kernels/linear_relu_binding.cpp line 17: calls torch::relu()" in message
    assert "paper rule: no torch operator beyond allocation" in message
    method = binding.replace("return y;", "return y.sum(1);")
    assert (
        "calls the tensor method .sum()"
        in codes(with_file("gemm_cublas", "kernels/linear_relu_binding.cpp", method))["static_paper_torch_operator"]
    )
    # The standard profile does not apply the paper's rules.
    assert "static_paper_torch_operator" not in codes(
        with_file("gemm_cublas", "kernels/linear_relu_binding.cpp", cheat), RuleProfile.STANDARD
    )


def test_a_torch_operator_in_python_is_refused_naming_the_rule() -> None:
    source = (
        workspace("gemm_cublas")
        .files["model_new.py"]
        .replace(
            "return cuda_extension.linear_relu(x, self.linear.weight, self.linear.bias)",
            "return torch.nn.functional.relu(self.linear(x)).clamp(0)",
        )
    )
    source = "import torch\n" + source
    found = [f.message for f in scan_candidate(with_file("gemm_cublas", "model_new.py", source), RuleProfile.PAPER)]
    assert any("calls torch.nn.functional.relu()" in m and "no torch operator beyond allocation" in m for m in found)
    assert any("calls .clamp()" in m for m in found)
    # Building modules in __init__ is allocation (their weights are the reference's after transfer).
    assert scan_candidate(workspace("conv_cudnn"), RuleProfile.PAPER) == []


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("import cuda_extension\ndef f(x):\n    return cuda_extension.relu(x)", False),
        ("import cuda_extension as ext\ndef f(x):\n    return ext.softmax(x)", False),
        ("_k = load_kernels()\ndef f(x):\n    return _k.silu(x)", False),
        (
            "class M:\n    def __init__(self):\n        self.k = load_kernels()\n"
            "    def f(self, x):\n        return self.k.sum(x)",
            False,
        ),
        # Another value bound to the same name: its methods may be torch's.
        ("import torch\n_k = load_kernels()\n_k = torch\ndef f(x):\n    return _k.relu(x)", True),
        ("import cuda_extension\ndef f(x):\n    return x.relu()", True),
    ],
)
def test_a_launcher_named_like_a_tensor_method_is_a_kernel_call(source: str, flagged: bool) -> None:
    """Found on the H200: a project-form launcher called `silu` (`_k.silu(x, y, n)`) was taken for Tensor.silu."""
    assert bool(paper_python(source, "model_new.py")) is flagged


def test_vendor_libraries_only_for_gemm_and_convolution() -> None:
    gemm = workspace("gemm_cublas").files["kernels/gemm.cpp"]
    axpy = gemm.replace("return cublasSgemm(", "cublasSaxpy(handle, n, &alpha, x, 1, y, 1);\n  return cublasSgemm(")
    message = codes(with_file("gemm_cublas", "kernels/gemm.cpp", axpy))["static_paper_vendor_call"]
    assert "calls cublasSaxpy()" in message and "cuBLAS only for GEMM, cuDNN only for convolution" in message
    conv = workspace("conv_cudnn").files["kernels/conv.cpp"]
    activation = conv.replace(
        "  cudnnDestroyConvolutionDescriptor",
        "  cudnnActivationForward(handle);\n  cudnnDestroyConvolutionDescriptor",
        1,
    )
    assert (
        "cudnnActivationForward"
        in codes(with_file("conv_cudnn", "kernels/conv.cpp", activation))["static_paper_vendor_call"]
    )
    fft = with_file("elementwise", "kernels/fft.cpp", "#include <cufft.h>\n")
    assert "includes cufft.h (cufft)" in codes(fft)["static_paper_vendor_library"]


class Reference(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.ones(3))


def test_weight_transfer_loads_the_reference_or_names_the_keys() -> None:
    reference, candidate = Reference(), Reference()
    transfer_state(reference, candidate)
    assert torch.equal(candidate.linear.weight, reference.linear.weight)

    class Renamed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)
            self.register_buffer("scale", torch.ones(5))

    with pytest.raises(WeightTransferError) as error:
        transfer_state(reference, Renamed())
    message = str(error.value)
    assert "missing in ModelNew: linear.bias, linear.weight" in message
    assert "not in the reference: fc.bias, fc.weight" in message
    assert "shape mismatch: scale (reference (3,), ModelNew (5,))" in message


def project(name: str) -> CandidateSource:
    return read_candidate_dir(PROJECTS / name, CandidateForm.PROJECT)


def test_project_converts_to_workdir_and_back() -> None:
    original = project("reduction")
    converted = project_to_workdir(original)
    assert converted.form is CandidateForm.WORKDIR and layout_error(converted) is None
    binding = converted.files[GENERATED_BINDING]
    assert 'extern "C" void row_sum(const float*, float*, int, int, cudaStream_t);' in binding
    assert "static void bind_row_sum(torch::Tensor a0, torch::Tensor a1, int a2, int a3)" in binding
    assert scan_candidate(converted, RuleProfile.PAPER) == []
    assert workdir_to_project(converted) == original
    with pytest.raises(ConversionError, match=r"kernels/row_sum_binding\.cpp: hand-written torch bindings"):
        workdir_to_project(workspace("reduction"))


def test_write_workspace_completes_it_for_the_released_scripts(tmp_path: Path) -> None:
    written = write_workspace(project("elementwise"), problem("elementwise"), tmp_path)
    assert (tmp_path / "model.py").read_text() == problem("elementwise")
    for name, text in PLATFORM_FILES.items():
        assert (tmp_path / name).read_text() == text
    assert read_candidate(tmp_path) == written


def test_the_agent_environment_presents_the_workdir_form(tmp_path: Path) -> None:
    config = RolloutConfig(form=CandidateForm.WORKDIR)
    skill = render_skill(config)
    assert "REGISTER_BINDING" in skill and "import cuda_extension" in skill and "atol = rtol = 1e-2" in skill
    env = KernelEnv(problem("elementwise"), config=config, workspace_dir=tmp_path / "ws")
    env.reset()
    root = env.workspace.root
    assert (root / "kernels").is_dir()
    assert {n: (root / n).read_text() for n in PLATFORM_FILES} == PLATFORM_FILES
    # What the agent writes there is read back as a workdir candidate, the platform files left out.
    shutil.copytree(WORKSPACES / "elementwise" / "kernels", root / "kernels", dirs_exist_ok=True)
    shutil.copy(WORKSPACES / "elementwise" / "model_new.py", root / "model_new.py")
    assert env.workspace.candidate(CandidateForm.WORKDIR) == workspace("elementwise")
    env.close()
