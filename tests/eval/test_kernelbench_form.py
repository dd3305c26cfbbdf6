"""KernelBench-form candidates (``load_inline``): the hooks around extension functions, and real extensions
built by compile_candidate and evaluated end to end on CPU. The CUDA example runs in test_gpu_eval.py."""

from __future__ import annotations

import math
import types
from collections.abc import Iterator
from typing import Any

import pytest
from torch.utils import cpp_extension

from cuda_agent.compile import compile_candidate
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.contracts.common import CompileStatus, EvalStatus
from cuda_agent.contracts.compile import CompileRequest
from cuda_agent.contracts.eval import EvalRequest, EvalResult
from cuda_agent.eval import evaluate, extensions
from tests.eval.helpers import RELU_ADD, codes, edit

# relu(x) + bias as a plain loop over raw pointers: no ATen compute, only an allocation.
CPP = r"""
#include <torch/extension.h>
torch::Tensor relu_add(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat, "relu_add: contiguous float32 x");
    auto out = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* op = out.data_ptr<float>();
    int64_t n = x.numel(), m = bias.numel();
    for (int64_t i = 0; i < n; ++i) op[i] = (xp[i] > 0.0f ? xp[i] : 0.0f) + bp[i % m];
    return out;
}
"""

CANDIDATE = f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="relu_add_ext", cpp_sources=r"""{CPP}""", functions=["relu_add"])


class ModelNew(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(size))

    def forward(self, x):
        return ext.relu_add(x.contiguous(), self.bias)
'''


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[bool, int | None]] = []

    def __call__(self, before: bool, stream: int | None) -> None:
        self.calls.append((before, stream))


@pytest.fixture
def hooked_loader(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    """cpp_extension.load_inline returning a module of real compiled (builtin) functions, wrapped by install()."""
    module = types.ModuleType("fake_ext")
    module.sqrt = math.sqrt  # type: ignore[attr-defined]
    module.scale = 2.0  # type: ignore[attr-defined]
    monkeypatch.setattr(cpp_extension, "load_inline", lambda *a, **k: module)
    monkeypatch.setattr(cpp_extension, "load", lambda *a, **k: None)
    # No GPU here: the stream the hook is told about is a stand-in.
    monkeypatch.setattr(extensions, "_current_stream", lambda: types.SimpleNamespace(cuda_stream=7))
    recorder = Recorder()
    set_hook = extensions.install()
    set_hook(recorder)
    yield recorder
    set_hook(None)


def test_extension_functions_call_the_hook_around_each_call(hooked_loader: Recorder) -> None:
    ext: Any = cpp_extension.load_inline(name="x", cpp_sources="")
    assert ext.sqrt(9.0) == 3.0 and ext.scale == 2.0
    with pytest.raises(ValueError):
        ext.sqrt(-1.0)
    # A raising call still closes its interval; only compiled functions are wrapped.
    assert hooked_loader.calls == [(True, 7), (False, 7), (True, 7), (False, 7)]
    assert cpp_extension.load(name="y", sources=[]) is None  # a non-module result passes through untouched


def test_without_a_hook_calls_go_straight_through(hooked_loader: Recorder) -> None:
    extensions.set_hook(None)
    ext: Any = cpp_extension.load_inline(name="x", cpp_sources="")
    assert ext.sqrt(4.0) == 2.0 and hooked_loader.calls == []


def build_and_run(candidate: str) -> EvalResult:
    source = CandidateSource(form=CandidateForm.KERNELBENCH, files={"model_new.py": candidate})
    built = compile_candidate(CompileRequest(candidate=source, device="cpu"))
    assert built.status is CompileStatus.OK, built.log[-3000:]
    return evaluate(
        EvalRequest(
            problem_source=RELU_ADD,
            candidate=source,
            artifact_key=built.artifact_key,
            device="cpu",  # type: ignore[arg-type]
            measure_baselines=False,
            timing_trials=12,
            warmup=2,
        )
    )


@pytest.mark.slow
@pytest.mark.sandbox
def test_load_inline_candidate_is_correct_through_the_hooked_module() -> None:
    result = build_and_run(CANDIDATE)
    assert result.status is EvalStatus.CORRECT, (result.message, result.findings)
    assert result.findings == [] and result.reward == 1.0


@pytest.mark.slow
@pytest.mark.sandbox
def test_aten_compute_inside_the_extension_is_caught() -> None:
    """PyTorch ops called from the candidate's C++ go through the dispatcher, where the run-time guard sees them."""
    hack = edit(
        CANDIDATE,
        "for (int64_t i = 0; i < n; ++i) op[i] = (xp[i] > 0.0f ? xp[i] : 0.0f) + bp[i % m];\n    return out;",
        "(void)xp; (void)bp; (void)op; (void)n; (void)m;\n    return at::relu(x) + bias;",
    )
    result = build_and_run(hack)
    assert result.status is EvalStatus.HACK_DETECTED, (result.status, result.message, result.findings)
    assert "torch_compute_in_forward" in codes(result)
