"""Rejection-sampled fine-tuning: keep the trajectories worth imitating, then supervised learning on the policy's
own tokens only."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from cuda_agent.contracts.agent import Trajectory
from cuda_agent.train.data import masked_mean, trajectory_reward


def is_loop(trajectory: Trajectory, repeats: int) -> bool:
    """The agent made the same tool call (name and arguments) ``repeats`` times in a row: it was stuck, and
    imitating it would teach the stall even when a later turn happened to succeed."""
    run = 0
    previous: tuple[str, str] | None = None
    for turn in trajectory.turns:
        for call in turn.assistant.tool_calls:
            key = (call.name, call.arguments)
            run = run + 1 if key == previous else 1
            previous = key
            if run >= repeats:
                return True
    return False


def has_invalid_call(trajectory: Trajectory) -> bool:
    """Some tool call was refused or failed: arguments that are not a JSON object, or an observation not ok
    (unknown tool, arguments against the schema, tool error)."""
    for turn in trajectory.turns:
        if any(not o.ok for o in turn.observations):
            return True
        for call in turn.assistant.tool_calls:
            try:
                if not isinstance(json.loads(call.arguments or "{}"), dict):
                    return True
            except json.JSONDecodeError:
                return True
    return False


@dataclass(frozen=True)
class Rejections:
    kept: int
    no_reward: int  # reward <= 0 or never verified
    loop: int
    invalid_call: int


def rejection_filter(trajectories: Sequence[Trajectory], loop_repeats: int) -> tuple[list[Trajectory], Rejections]:
    """The trajectories RFT trains on: reward > 0, no loop, no invalid tool call; and why the others were dropped
    (each by the first rule it fails, in that order)."""
    kept: list[Trajectory] = []
    no_reward = loop = invalid = 0
    for trajectory in trajectories:
        reward = trajectory_reward(trajectory)
        if reward is None or reward <= 0:
            no_reward += 1
        elif is_loop(trajectory, loop_repeats):
            loop += 1
        elif has_invalid_call(trajectory):
            invalid += 1
        else:
            kept.append(trajectory)
    return kept, Rejections(kept=len(kept), no_reward=no_reward, loop=loop, invalid_call=invalid)


def sft_loss(logprobs: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of the policy's own tokens, averaged over them; prompt and observation tokens (mask 0)
    contribute nothing, whatever the model predicts there."""
    return -masked_mean(logprobs, action_mask)
