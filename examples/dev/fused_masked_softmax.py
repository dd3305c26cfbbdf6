"""Softmax of scaled scores plus a broadcast additive key mask (-inf on padded keys)."""

import torch
import torch.nn as nn

BATCH = 64
HEADS = 16
QUERIES = 512
KEYS = 1024
SCALE = 0.125


def padding_bias() -> torch.Tensor:
    """0 on the first keys of each sequence and -inf on the rest: every row keeps at least 256 keys."""
    lengths = torch.randint(256, KEYS + 1, (BATCH, 1))
    return torch.where(torch.arange(KEYS) < lengths, 0.0, float("-inf"))


class Model(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, scores: torch.Tensor, key_bias: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scores * self.scale + key_bias[:, None, None, :], dim=-1)


def get_inputs():
    return [4.0 * torch.randn(BATCH, HEADS, QUERIES, KEYS), padding_bias()]


def get_init_inputs():
    return [SCALE]
