"""verify_candidate: compile, then judge, through the real compile and eval libraries on the CPU."""

from __future__ import annotations

import pytest

from cuda_agent.contracts.agent import RolloutConfig
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource, RuleProfile
from cuda_agent.contracts.common import CompileStatus, Device, EvalStatus, TolerancePreset
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.contracts.eval import EvalOptions, EvalRequest, EvalResult
from cuda_agent.verify import LocalBackend, eval_request, verify_candidate
from tests.agent.agent_fixtures import PROBLEM
from tests.agent.test_rollout_e2e import FIX, KERNEL, MODEL_NEW

pytestmark = pytest.mark.sandbox

OPTIONS = EvalOptions(device=Device.CPU, correctness_trials=2, timing_trials=3, warmup=1, measure_baselines=False)


class CountingBackend(LocalBackend):
    """The real in-process backend, counting what verify_candidate asks of it."""

    def __init__(self) -> None:
        self.compiles = 0
        self.evaluations: list[EvalRequest] = []

    def compile(self, request: CompileRequest) -> CompileResult:
        self.compiles += 1
        return super().compile(request)

    def evaluate(self, request: EvalRequest) -> EvalResult:
        self.evaluations.append(request)
        return super().evaluate(request)


def project(kernel: str) -> CandidateSource:
    return CandidateSource(form=CandidateForm.PROJECT, files={"model_new.py": MODEL_NEW, "kernels/add.cpp": kernel})


def test_a_candidate_that_does_not_compile_is_not_judged() -> None:
    backend = CountingBackend()
    compiled, result = verify_candidate(PROBLEM, project(KERNEL), OPTIONS, backend)
    assert compiled.status is CompileStatus.COMPILE_ERROR and result is None
    assert backend.compiles == 1 and backend.evaluations == []


def test_compiles_then_judges_and_reuses_an_earlier_build() -> None:
    candidate = project(KERNEL.replace(FIX["old_string"], FIX["new_string"]))
    backend = CountingBackend()
    compiled, result = verify_candidate(PROBLEM, candidate, OPTIONS, backend)
    assert compiled.status is CompileStatus.OK and result is not None
    assert result.status is EvalStatus.CORRECT and result.reward == 1.0, result.message
    assert backend.evaluations[0].artifact_key == compiled.artifact_key
    assert backend.evaluations[0].timing_trials == 3

    again, result = verify_candidate(PROBLEM, candidate, OPTIONS, backend, compiled=compiled)
    assert again is compiled and backend.compiles == 1 and len(backend.evaluations) == 2
    assert result is not None and result.status is EvalStatus.CORRECT


def test_a_rollout_config_judges_with_its_evaluation_options_only() -> None:
    config = RolloutConfig(tolerance=TolerancePreset.STRICT, timing_trials=7, bash_timeout_s=5, max_turns=3)
    request = eval_request(PROBLEM, project(KERNEL), None, config)
    assert type(request) is EvalRequest
    assert request.tolerance is TolerancePreset.STRICT and request.timing_trials == 7
    # Unset rules and weight transfer resolve by the candidate's form (the project form: standard, no transfer);
    # every other option is the config's.
    options = set(EvalOptions.model_fields) - {"rules", "load_reference_state"}
    assert request.model_dump(include=options) == config.model_dump(include=options)
    assert config.rules is None and request.rules is RuleProfile.STANDARD
    assert config.load_reference_state is None and request.load_reference_state is False
