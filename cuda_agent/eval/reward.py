"""The reward RL trains on: -1 wrong, 1 correct, 2 faster than eager, 3 faster than eager and torch.compile.

An evaluation the sandbox could not finish is no verdict on the candidate and has no reward at all (None), never
-1: ``failure_reward`` is the one place that rule is decided.
"""

from __future__ import annotations

import math

from cuda_agent.contracts.common import EvalStatus


def failure_reward(status: EvalStatus) -> float | None:
    """Reward of an evaluation that did not end correct: None for an infrastructure fault, else -1."""
    return None if status is EvalStatus.SANDBOX_ERROR else -1.0


def reward_for(
    correct: bool, speedup_vs_eager: float | None, speedup_vs_compile: float | None, threshold: float
) -> float:
    """Discrete reward. A missing baseline never counts as beaten."""
    if not correct:
        return -1.0
    beats_eager = speedup_vs_eager is not None and speedup_vs_eager > threshold
    beats_compile = speedup_vs_compile is not None and speedup_vs_compile > threshold
    if beats_eager and beats_compile:
        return 3.0
    if beats_eager:
        return 2.0
    return 1.0


def continuous_speedup(*speedups: float | None) -> float | None:
    """Geometric mean of the available speedups, for research curves."""
    values = [s for s in speedups if s is not None and s > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
