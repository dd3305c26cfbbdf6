"""The author writing the workdir form (the released CUDA Agent environment's layout and rules): ModelNew declares
the reference's state by name instead of embedding the reference, so it passes the paper rules' static scan, and
the reference's state_dict loads into it (nested modules, buffers, integer buffers)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from cuda_agent.author import author_problem
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource, RuleProfile
from cuda_agent.eval.static_scan import paper_python, scan_candidate
from cuda_agent.workdir.convert import GENERATED_BINDING
from cuda_agent.workdir.weights import transfer_state
from tests.author import problems

BATCHNORM = problems.problem(
    "        self.body = nn.Sequential(nn.Conv2d(4, 8, 3), nn.BatchNorm2d(8))\n        self.body.eval()",
    "        return torch.relu(self.body(x))",
    "[torch.randn(2, 4, 12, 12)]",
)
NON_PERSISTENT = problems.problem(
    "        self.register_buffer('scale', torch.full((64,), 2.0), persistent=False)",
    "        return x * self.scale",
    "[torch.randn(8, 64)]",
)


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)
    return module


@pytest.fixture
def cuda_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    """model_new.py imports the built module by name; declaring the state does not call it."""
    monkeypatch.setitem(sys.modules, "cuda_extension", types.ModuleType("cuda_extension"))


@pytest.mark.usefixtures("cuda_extension")
@pytest.mark.parametrize(
    "source",
    [problems.LINEAR_RELU, problems.RMSNORM, BATCHNORM, problems.CONV_ONLY, problems.BF16_LINEAR_SOFTMAX],
    ids=["linear", "rms", "bn", "conv_only", "bf16"],
)
def test_workdir_variants_follow_the_paper_rules_and_take_the_reference_state(source: str) -> None:
    authored = author_problem(source, "cuda", tf32=True, form="workdir")
    assert not authored.unsupported and authored.variants
    for _, files in authored.variants:
        candidate = CandidateSource(form=CandidateForm.WORKDIR, files=files)
        assert GENERATED_BINDING in files and "kernels/author.cu" in files
        assert scan_candidate(candidate, RuleProfile.PAPER) == []  # Python and C++, vendor calls included
    reference = _load(source, "reference")
    model = reference.Model(*reference.get_init_inputs())
    model_new = _load(authored.variants[0][1]["model_new.py"], "model_new").ModelNew(*reference.get_init_inputs())
    transfer_state(model, model_new)
    for name, value in model.state_dict().items():
        assert torch.equal(model_new.state_dict()[name], value), name


def test_the_project_form_embeds_the_reference_and_is_refused_by_the_paper_rules() -> None:
    """Why the workdir form needs its own ModelNew: the project form's carries the reference's torch calls."""
    _, files = author_problem(problems.LINEAR_RELU, "cuda").variants[0]
    assert any("torch.relu" in f.message for f in paper_python(files["model_new.py"], "model_new.py"))


def test_a_buffer_outside_the_state_dict_is_unsupported_in_the_workdir_form() -> None:
    authored = author_problem(NON_PERSISTENT, "cuda", form="workdir")
    assert authored.unsupported is not None and "buffer scale" in authored.unsupported
    assert not author_problem(NON_PERSISTENT, "cuda").unsupported


def test_a_tensor_attribute_is_unsupported_in_the_workdir_form_only() -> None:
    authored = author_problem(problems.TENSOR_ATTRIBUTES, "cuda", form="workdir")
    assert authored.unsupported is not None and "tensor attribute h0" in authored.unsupported
    assert not author_problem(problems.TENSOR_ATTRIBUTES, "cuda").unsupported
