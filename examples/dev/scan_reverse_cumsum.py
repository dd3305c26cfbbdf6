"""Reverse cumulative sum (suffix sums) along 32768-long float32 rows, via flips."""

import torch
import torch.nn as nn

ROWS = 16384
COLS = 32768


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flip(-1).cumsum(-1).flip(-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
