"""Tiny CPU problem of the bench gate's test: a reduction after an activation, relu(x).sum(dim=1)."""

import torch
import torch.nn as nn

ROWS = 64
COLS = 256


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).sum(dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
