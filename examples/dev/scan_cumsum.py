"""Cumulative sum down the columns (dim 0, a strided scan) of a 2 GB float32 matrix."""

import torch
import torch.nn as nn

ROWS = 16384
COLS = 32768


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=0)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
