"""PPO over multi-turn trajectories: schedules, the clipped objective, the KL penalty, and pluggable rollouts.

Rollouts are functions that, given the current policy, return trajectories (the same contract agent_svc stores),
so the training step is the same whether they come from the agent against real tools or from a toy task. They are
registered by name because the run's configuration selects one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from cuda_agent.contracts.agent import Trajectory
from cuda_agent.contracts.train import ClipSchedule, TrainConfig
from cuda_agent.train.data import masked_mean


@dataclass
class Policy:
    """What a rollout needs to sample: the model being trained, its tokenizer, and the name trajectories carry."""

    model: Any  # a transformers causal LM (possibly DDP-wrapped)
    tokenizer: Any
    name: str
    device: torch.device


# (policy, config, step, rank) -> trajectories. The step and rank seed the sampling, so a run resumed from a
# checkpoint samples what it would have sampled had it not been killed.
Rollout = Callable[[Policy, TrainConfig, int, int], list[Trajectory]]
_ROLLOUTS: dict[str, Rollout] = {}


def register_rollout(name: str, rollout: Rollout) -> None:
    if name in _ROLLOUTS:
        raise ValueError(f"rollout {name!r} is already registered")
    _ROLLOUTS[name] = rollout


def get_rollout(name: str) -> Rollout:
    try:
        return _ROLLOUTS[name]
    except KeyError:
        raise KeyError(f"unknown rollout {name!r}; registered: {', '.join(sorted(_ROLLOUTS))}") from None


def clip_range(config: TrainConfig, step: int) -> tuple[float, float]:
    """(low, high): the ratio may move within [1 - low, 1 + high] at this step (0-based)."""
    if config.clip_schedule is ClipSchedule.DECAYED:
        clip = config.clip_start * (1 - config.clip_decay) ** (step // config.clip_decay_every)
        return clip, clip
    return config.clip_low, config.clip_high


def entropy_coef(config: TrainConfig, step: int) -> float:
    """The entropy bonus, decayed linearly from entropy_coef at step 0 to 0 at entropy_decay_steps."""
    horizon = config.entropy_decay_steps or config.steps
    return config.entropy_coef * max(0.0, 1 - step / horizon)


def clipped_objective(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The PPO policy loss (to minimize) and the fraction of tokens whose clipped term bound the objective.

    The asymmetric range lets a token whose advantage is positive gain more probability (up to 1 + clip_high)
    than one with a negative advantage may lose (down to 1 - clip_low), which keeps exploration alive.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high) * advantages
    loss = -masked_mean(torch.minimum(unclipped, clipped), mask)
    clip_fraction = masked_mean((clipped < unclipped).float(), mask)
    return loss, clip_fraction


def kl_to_reference(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token KL(policy || reference), the non-negative low-variance "k3" estimator on sampled tokens."""
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - log_ratio - 1


def whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Advantages normalized to mean 0, std 1 over the masked positions (the batch's scale then does not set the
    step size)."""
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean).pow(2), mask)
    return (values - mean) * torch.rsqrt(variance + 1e-8) * mask
