"""Example problem: y = relu(x) + bias, elementwise."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.randn(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) + self.bias


batch = 64
size = 1024


def get_inputs():
    return [torch.randn(batch, size)]


def get_init_inputs():
    return [size]
