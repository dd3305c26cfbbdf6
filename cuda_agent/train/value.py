"""The critic: a transformer backbone with a scalar value head, and the GAE / TD(lambda) targets it learns.

The critic is a model of its own (the policy's architecture, initialized from the policy's weights), not a head
on the policy: value pretraining then never moves the actor, and the two keep separate learning rates as the
paper's recipe has them (actor 3e-6, critic 6e-6).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from cuda_agent.train.data import Batch, masked_mean

VALUE_HEAD_FILE = "value_head.pt"


class Critic(nn.Module):
    """V(prefix): the value of the state after each prefix of the sequence."""

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1)
        # A zero head predicts 0 everywhere at first: no arbitrary initial values that the first GAE would trust.
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_pretrained(cls, folder: Path) -> Critic:
        """A critic from a policy folder (fresh head) or a saved critic folder (its head too)."""
        from transformers import AutoModel

        backbone = AutoModel.from_pretrained(folder)
        critic = cls(backbone, backbone.config.hidden_size)
        head = folder / VALUE_HEAD_FILE
        if head.exists():
            critic.head.load_state_dict(torch.load(head, weights_only=True))
        return critic

    def save_pretrained(self, folder: Path) -> None:
        self.backbone.save_pretrained(folder)  # type: ignore[operator]
        torch.save(self.head.state_dict(), folder / VALUE_HEAD_FILE)

    def forward(self, batch: Batch) -> torch.Tensor:
        """Values aligned with the batch's targets ([B, L-1]): position t values the prefix ending at t, the state
        in which target t+1 is chosen."""
        hidden = self.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        # The head runs in float32 even under bf16 autocast: GAE subtracts values that differ in the third digit.
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            return self.head(hidden[:, :-1].float()).squeeze(-1)


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimates and TD(lambda) returns over the policy's tokens ([B, T] each).

    Only mask-1 positions are actions; positions between them (tool output, padding) are skipped, so the last token
    of one turn bootstraps from the value at the first token of the next, and the last action from 0 (episode end).
    """
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.shape[1])):
        is_action = mask[:, t] > 0
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = torch.where(is_action, advantage, torch.zeros_like(advantage))
        next_value = torch.where(is_action, values[:, t], next_value)
        next_advantage = torch.where(is_action, advantage, next_advantage)
    returns = (advantages + values) * mask
    return advantages, returns


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over the masked positions: 1 is perfect, 0 is no better than
    predicting the mean, negative is worse (NaN when the returns do not vary)."""
    selected = mask > 0
    target = returns[selected]
    residual = target - values[selected]
    variance = target.var(unbiased=False)
    if target.numel() == 0 or variance == 0:
        return float("nan")
    return float(1 - residual.var(unbiased=False) / variance)


def l2_penalty(module: nn.Module) -> torch.Tensor:
    """Sum of squared parameters (the critic's regularizer; unlike AdamW's decay it is part of the reported loss)."""
    return sum((p.float().pow(2).sum() for p in module.parameters() if p.requires_grad), torch.zeros(()))


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    old_values: torch.Tensor | None = None,
    clip: float | None = None,
) -> torch.Tensor:
    """Half mean squared error to the returns; with ``clip``, PPO-style: the worse of the plain and the clipped
    (within clip of the rollout's values) errors, so one update cannot move a value far."""
    error = (values - returns).pow(2)
    if clip is not None and old_values is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        error = torch.maximum(error, (clipped - returns).pow(2))
    return 0.5 * masked_mean(error, mask)
