"""The `heuristic` policy: template kernels for elementwise problems, built and verified for real."""

from __future__ import annotations

import pytest

from cuda_agent.agent import KernelEnv, create_policy, run_rollout
from cuda_agent.agent.policies.heuristic import Unsupported, translate
from cuda_agent.contracts.agent import RolloutConfig, TerminationReason
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
MATMUL = ELEMENTWISE.replace(
    "return torch.sigmoid(x) * y + 2.0 - F.leaky_relu(x, 0.2).clamp(min=-1.0, max=3.0)", "return torch.matmul(x, y.T)"
)


def test_translate_compound_expression() -> None:
    params, used, expr = translate(ELEMENTWISE)
    assert params == ["x", "y"] and used == ["x", "y"]
    assert expr == (
        "((((1.0f / (1.0f + expf(-(x[i])))) * y[i]) + 2.0f) - "
        "fminf(fmaxf((x[i] > 0.0f ? x[i] : 0.2f * x[i]), -1.0f), 3.0f))"
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("return torch.matmul(x, y.T)", "unsupported call"),
        ("z = x + y\n        return z", "single return"),
        ("return x.sum()", "unsupported call"),
        ("return 1.0", "reads no input"),
    ],
)
def test_translate_rejects_non_elementwise(body: str, reason: str) -> None:
    src = ELEMENTWISE.replace("return torch.sigmoid(x) * y + 2.0 - F.leaky_relu(x, 0.2).clamp(min=-1.0, max=3.0)", body)
    with pytest.raises(Unsupported, match=reason):
        translate(src)


def test_unsupported_problem_finishes_without_candidate() -> None:
    env = KernelEnv(MATMUL, config=RolloutConfig(device=Device.CPU))
    traj = run_rollout(env, create_policy("heuristic"))
    assert traj.termination is TerminationReason.FINISHED and len(traj.turns) == 1
    assert "unsupported call 'torch.matmul(x, y.T)'" in traj.termination_detail and traj.best is None


@pytest.mark.sandbox
def test_heuristic_writes_a_correct_cpu_candidate() -> None:
    config = RolloutConfig(device=Device.CPU, timing_trials=5, warmup=1, correctness_trials=2, measure_baselines=False)
    traj = run_rollout(KernelEnv(ELEMENTWISE, config=config), create_policy("heuristic"))
    assert traj.termination is TerminationReason.FINISHED, traj.termination_detail
    assert traj.turns[0].observations[-1].content.startswith("compile: ok")
    assert traj.best is not None and traj.best.result.correct, traj.turns[1].observations[0].content
    assert set(traj.best.candidate.files) == {"model_new.py", "kernels/elementwise.cpp"}


@pytest.mark.gpu
def test_heuristic_writes_a_correct_cuda_candidate() -> None:
    traj = run_rollout(KernelEnv(ELEMENTWISE, config=RolloutConfig(device=Device.CUDA)), create_policy("heuristic"))
    assert traj.termination is TerminationReason.FINISHED, traj.termination_detail
    assert traj.best is not None and traj.best.result.correct, traj.turns[1].observations[0].content
    assert traj.best.result.reward is not None and traj.best.result.reward >= 1.0
    assert traj.best.result.speedup_vs_eager is not None
