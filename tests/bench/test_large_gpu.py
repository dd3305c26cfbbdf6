"""Every candidate of examples/large agrees with its problem on the GPU, at a twentieth of the size (edges of
tiles included: e.g. the GEMM gets M = 819). The full-size verdicts come from `scripts/device_gpu_tests.sh large`."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.bench.cases import discover_cases, pin_scale
from cuda_agent.bench.floor import FloorRequest, run_floor
from cuda_agent.compile import compile_candidate, materialize_artifact
from cuda_agent.contracts.candidate import read_candidate
from cuda_agent.contracts.common import CompileStatus, Device
from cuda_agent.contracts.compile import CompileRequest

pytestmark = pytest.mark.gpu

CASES = discover_cases(Path(__file__).resolve().parents[2] / "examples" / "large")


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_candidate_agrees_with_its_problem_in_process(case, tmp_path: Path) -> None:
    candidate = read_candidate(case.candidate)
    built = compile_candidate(CompileRequest(candidate=candidate, device=Device.CUDA))
    assert built.status is CompileStatus.OK and built.artifact_key, built.message
    runtime = materialize_artifact(built.artifact_key, tmp_path)
    source = pin_scale(case.problem.read_text(), 0.05, str(case.problem))
    request = FloorRequest(problem_source=source, model_new=candidate.model_new, device="cuda", timing_trials=3)
    floor = run_floor(request, runtime.env, timeout_s=300)
    assert floor.error is None, floor.error
    assert floor.correct, floor.failure
