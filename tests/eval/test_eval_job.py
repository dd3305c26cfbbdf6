"""The evaluate job builds a project candidate that arrives without a build, through the one compile-then-verify
flow (cuda_agent.verify), and turns a build the candidate broke into its verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.contracts.candidate import CandidateSource, read_candidate
from cuda_agent.contracts.common import Device, EvalStatus
from cuda_agent.contracts.eval import EvalRequest
from cuda_agent.jobs import run_to_result
from cuda_agent.jobs.registry import EVALUATE_JOB

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.sandbox


def _request(candidate: CandidateSource) -> EvalRequest:
    return EvalRequest(
        problem_source=(EXAMPLES / "problems" / "relu_add.py").read_text(),
        candidate=candidate,
        device=Device.CPU,
        correctness_trials=2,
        timing_trials=3,
        warmup=1,
        measure_baselines=False,
    )


def test_project_candidate_without_a_build_is_built_then_judged(embedded_db: None) -> None:
    result = run_to_result(EVALUATE_JOB, _request(read_candidate(EXAMPLES / "candidates" / "relu_add_cpu")))
    assert result.status is EvalStatus.CORRECT, result.message


def test_a_candidate_that_does_not_build_is_its_verdict(embedded_db: None) -> None:
    candidate = read_candidate(EXAMPLES / "candidates" / "relu_add_cpu")
    broken = {
        name: text + "\nthis is not C++;\n" if name.endswith(".cpp") else text for name, text in candidate.files.items()
    }
    result = run_to_result(EVALUATE_JOB, _request(candidate.model_copy(update={"files": broken})))
    assert result.status is EvalStatus.RUNTIME_ERROR and result.reward == -1.0 and result.fault == "candidate"
    assert "did not build (compile_error)" in result.message
