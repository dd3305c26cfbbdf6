"""Example problem: a fused activation with a residual, y = x * sigmoid(x) + r, on 16M elements."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x) + r


size = 1 << 24


def get_inputs():
    return [torch.randn(size), torch.randn(size)]


def get_init_inputs():
    return []
