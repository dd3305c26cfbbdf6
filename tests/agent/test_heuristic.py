"""The `heuristic` policy: the embedded kernel author acting through the agent's tools, built and verified for real.

The author's own layers are tested in tests/author; these tests hold the policy's contract with the loop."""

from __future__ import annotations

import pytest

from cuda_agent.agent import KernelEnv, create_policy, run_rollout
from cuda_agent.author import author_problem
from cuda_agent.contracts.agent import RolloutConfig, TerminationReason
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.contracts.common import Device

ELEMENTWISE = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        """Fused activation."""
        return torch.sigmoid(x) * y + 2.0 - F.leaky_relu(x, 0.2).clamp(min=-1.0, max=3.0)


def get_inputs():
    return [torch.randn(4096, 33), torch.randn(4096, 33)]


def get_init_inputs():
    return []
'''
SORT = ELEMENTWISE.replace(
    "return torch.sigmoid(x) * y + 2.0 - F.leaky_relu(x, 0.2).clamp(min=-1.0, max=3.0)",
    "return torch.sort(x, dim=1)[0] + y",
)


def test_unsupported_problem_finishes_without_candidate() -> None:
    env = KernelEnv(SORT, config=RolloutConfig(device=Device.CPU))
    traj = run_rollout(env, create_policy("heuristic"))
    assert traj.termination is TerminationReason.FINISHED and len(traj.turns) == 1
    assert traj.termination_detail.startswith("unsupported: ") and traj.best is None


@pytest.mark.sandbox
@pytest.mark.slow  # every CPU variant built and timed
def test_heuristic_writes_a_correct_cpu_candidate() -> None:
    config = RolloutConfig(device=Device.CPU, timing_trials=5, warmup=1, correctness_trials=2, measure_baselines=False)
    traj = run_rollout(KernelEnv(ELEMENTWISE, config=config), create_policy("heuristic"))
    assert traj.termination is TerminationReason.FINISHED, traj.termination_detail
    assert traj.turns[0].observations[-1].content.startswith("verify: correct"), traj.turns[0].observations[-1]
    assert traj.best is not None and traj.best.result.correct
    assert set(traj.best.candidate.files) == {"model_new.py", "kernels/author.cpp"}


@pytest.mark.sandbox
def test_the_variants_after_the_first_are_built_in_the_background() -> None:
    source = ELEMENTWISE.replace("+ 2.0", "+ 2.5")  # a problem of its own: no other test's builds are cached
    env = KernelEnv(source, config=RolloutConfig(device=Device.CPU))
    variants = [CandidateSource(form=CandidateForm.PROJECT, files=f) for _, f in author_problem(source, "cpu").variants]
    try:
        for build in env.prebuild(variants[1:]):
            build.result(timeout=600)
        # What the policy writes and verifies next is then a cache hit, where the first variant is a build.
        assert [env.compile(c).cache_hit for c in variants] == [False] + [True] * (len(variants) - 1)
    finally:
        env.close()


@pytest.mark.gpu
def test_heuristic_writes_a_correct_cuda_candidate() -> None:
    policy = create_policy("heuristic", budget_s=60.0)
    traj = run_rollout(KernelEnv(ELEMENTWISE, config=RolloutConfig(device=Device.CUDA)), policy)
    assert traj.termination is TerminationReason.FINISHED, traj.termination_detail
    assert traj.best is not None and traj.best.result.correct, traj.turns[0].observations[-1].content
    assert traj.best.result.reward is not None and traj.best.result.reward >= 1.0
    assert traj.best.result.speedup_vs_eager is not None


def test_an_incorrect_variant_is_recorded_with_the_verifiers_reasons() -> None:
    """A benchmark table keeps the search's record: a variant the verifier fails shows why and by how much."""
    from cuda_agent.agent.tools.kernel import format_eval
    from cuda_agent.author.search import Authored, Search
    from cuda_agent.contracts.eval import EvalResult, EvalStatus

    result = EvalResult(
        status=EvalStatus.INCORRECT,
        correct=False,
        reward=-1.0,
        max_abs_error=2.5e-4,
        trials_passed=2,
        trials_run=3,
        message="output 0: max abs error 0.00025 exceeds atol=0.0001 rtol=0.0001; and more",
    )
    search = Search(Authored(plan="k0", variants=[("gemm=tf32x3", {})]))
    trial = search.record("gemm=tf32x3", format_eval(result))
    assert not trial.correct and trial.median_ms is None
    assert "max abs error 0.00025 exceeds atol=0.0001" in trial.why and "(2/3 trials)" in trial.why
    assert ";" not in trial.why  # the policy's summary separates variants by semicolons


@pytest.mark.parametrize(("passed", "goes_on"), [(2, True), (0, False)])
def test_the_search_goes_on_after_a_variant_that_misses_the_tolerance_on_some_trials(
    passed: int, goes_on: bool
) -> None:
    """A variant right on some trials missed the tolerance by its rounding (a plain float sum over a long K),
    which the next variant's arithmetic may not; one wrong on every trial is a wrong plan, as the rest would be."""
    from cuda_agent.agent.tools.kernel import format_eval
    from cuda_agent.author.search import Authored, Search
    from cuda_agent.contracts.eval import EvalResult, EvalStatus

    result = EvalResult(
        status=EvalStatus.INCORRECT,
        correct=False,
        reward=-1.0,
        max_abs_error=4.7e-4,
        trials_passed=passed,
        trials_run=6,
        message="output 0: max abs error 0.00047 exceeds atol=0.0001 rtol=0.0001",
    )
    search = Search(Authored(plan="k0", variants=[("gemm=pipelined", {}), ("gemm=tf32x3", {"b": "x"})]))
    assert search.next_files() == ("gemm=pipelined", {})
    assert search.record("gemm=pipelined", format_eval(result)).close is goes_on
    assert search.next_files() == (("gemm=tf32x3", {"b": "x"}) if goes_on else None)
