"""Logsumexp over 512-wide rows of a 4 GB float32 matrix, with large logits."""

import torch
import torch.nn as nn

ROWS = 2097152
COLS = 512


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(x, dim=-1)


def get_inputs():
    return [20.0 * torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
