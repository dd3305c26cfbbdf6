"""Shared helpers of the evaluation tests: real problems, real sandboxed evaluations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.contracts.eval import EvalRequest, EvalResult
from cuda_agent.eval import evaluate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RELU_ADD = (EXAMPLES / "problems" / "relu_add.py").read_text()
TRANSPOSE = (EXAMPLES / "problems" / "transpose_copy.py").read_text()
TRANSPOSE_NEW = (EXAMPLES / "candidates" / "transpose_copy_new.py").read_text()

HEADER = "import torch\nimport torch.nn as nn\n\n\n"


def module_new(forward_body: str, init_body: str = "pass", prelude: str = "") -> str:
    """A ModelNew with the given forward body (indented 8 spaces by the caller's dedent-free text)."""
    init = "\n".join("        " + line for line in init_body.strip().splitlines())
    body = "\n".join("        " + line for line in forward_body.strip().splitlines())
    return (
        HEADER
        + prelude
        + "\n\nclass ModelNew(nn.Module):\n    def __init__(self, *args):\n        super().__init__()\n"
        + init
        + "\n\n    def forward(self, x):\n"
        + body
        + "\n"
    )


def run(candidate: str, problem: str = TRANSPOSE, **fields: Any) -> EvalResult:
    options: dict[str, Any] = {
        "device": "cpu",
        "measure_baselines": False,
        "timing_trials": 12,
        "warmup": 2,
        "correctness_trials": 3,
        "timeout_s": 90,
    }
    options.update(fields)
    source = CandidateSource(form=CandidateForm.KERNELBENCH, files={"model_new.py": candidate})
    return evaluate(EvalRequest(problem_source=problem, candidate=source, **options))


def edit(text: str, old: str, new: str) -> str:
    """``text.replace(old, new)`` that fails when ``old`` is absent, so a test never runs on an unedited copy."""
    assert old in text, f"test fixture out of date: {old!r} not found"
    return text.replace(old, new)


def codes(result: EvalResult) -> set[str]:
    return {f.code for f in result.findings}
