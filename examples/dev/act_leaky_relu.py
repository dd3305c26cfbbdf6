"""Leaky ReLU whose negative slope is a constructor argument, over a 4 GB float32 matrix."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 65536
COLS = 16384
NEGATIVE_SLOPE = 0.05


class Model(nn.Module):
    def __init__(self, negative_slope: float) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [NEGATIVE_SLOPE]
