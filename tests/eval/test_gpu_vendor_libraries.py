"""A PROJECT candidate linking cuBLAS, built by compile_candidate and evaluated on the GPU (H200): the evaluation
child, in its sandbox, loads libkernels.so with its libcublas dependency and the verdict is correct."""

from __future__ import annotations

import pytest

from cuda_agent.compile import compile_candidate
from cuda_agent.contracts.candidate import read_candidate_dir
from cuda_agent.contracts.common import CompileStatus, Device, EvalStatus
from cuda_agent.contracts.compile import CompileRequest
from cuda_agent.contracts.eval import EvalRequest
from cuda_agent.eval import evaluate
from tests.eval.helpers import EXAMPLES

pytestmark = [pytest.mark.gpu, pytest.mark.sandbox]


def test_cublas_candidate_with_own_epilogue_is_correct() -> None:
    source = read_candidate_dir(EXAMPLES / "candidates" / "linear_relu_cublas")
    built = compile_candidate(CompileRequest(candidate=source, device=Device.CUDA))
    assert built.status is CompileStatus.OK, (built.message, built.log[-3000:])
    problem = (EXAMPLES / "problems" / "linear_relu.py").read_text()
    result = evaluate(
        EvalRequest(
            problem_source=problem,
            candidate=source,
            artifact_key=built.artifact_key,
            device=Device.CUDA,
            measure_baselines=False,
        )
    )
    assert result.status is EvalStatus.CORRECT, (result.message, result.findings)
    # The bias + ReLU kernel is the candidate's own: some GPU time is custom, whatever share cuBLAS takes.
    assert result.custom_kernel_time_share is not None and result.custom_kernel_time_share > 0, result.message
