"""The critic: a transformer backbone with a scalar value head, and the GAE / TD(lambda) targets it learns.

The critic is a model of its own (the policy's architecture, initialized from the policy's weights), not a head
on the policy: value pretraining then never moves the actor, and the two keep separate learning rates as the
paper's recipe has them (actor 3e-6, critic 6e-6).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

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

        backbone = AutoModel.from_pretrained(folder, use_kernels=False)  # as the policy (run._causal_lm)
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
        # No attention mask (see Batch), no KV cache (see token_logprobs).
        hidden = self.backbone(input_ids=batch.input_ids, use_cache=False).last_hidden_state
        # The head runs in float32 even under bf16 autocast: GAE subtracts values that differ in the third digit.
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            return self.head(hidden[:, :-1].float()).squeeze(-1)


def _reverse_scan(coef: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """x[:, t] = coef[:, t] * x[:, t + 1] + offset[:, t] for every t at once, with x = 0 past the end: log2(T) doubling
    steps of whole-tensor operations (x_t = a x_{t+d} + b composes with x_{t+d} = a' x_{t+2d} + b'), not T steps of
    [B]-sized ones, which on a GPU cost a dozen kernel launches per token of the sequence."""
    length = coef.shape[1]
    span = 1
    while span < length:
        # Past the end x is 0, so the padded coefficient never multiplies anything but 0.
        offset = offset + coef * F.pad(offset[:, span:], (0, span))
        coef = coef * F.pad(coef[:, span:], (0, span))
        span *= 2
    return offset


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimates and TD(lambda) returns over the policy's tokens ([B, T] each).

    Only mask-1 positions are actions; positions between them (tool output, padding) are skipped, so the last token
    of one turn bootstraps from the value at the first token of the next, and the last action from 0 (episode end).
    """
    is_action = mask > 0
    zero, one = torch.zeros_like(values), torch.ones_like(values)
    # The value of the first action at or after t (exact: each step takes a value or carries one, times 0 or 1).
    action_value = _reverse_scan(torch.where(is_action, zero, one), torch.where(is_action, values, zero))
    next_value = F.pad(action_value[:, 1:], (0, 1))
    delta = rewards + gamma * next_value - values
    # The advantage of the first action at or after t: A = delta + gamma * lam * (the next action's A).
    carried = _reverse_scan(torch.where(is_action, gamma * lam * one, one), torch.where(is_action, delta, zero))
    advantages = torch.where(is_action, carried, zero)
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


def add_l2_gradient(module: nn.Module, coef: float) -> None:
    """Add the gradient of ``coef`` times the sum of squared parameters (the critic's regularizer) to what backward
    left: one fused update over every parameter, where the penalty as a loss term cost a reduction per parameter
    tensor and its backward (hundreds of small launches per update)."""
    pairs = [(p.grad, p.detach()) for p in module.parameters() if p.grad is not None]
    if coef and pairs:
        grads, params = zip(*pairs, strict=True)
        torch._foreach_add_(list(grads), list(params), alpha=2 * coef)


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
