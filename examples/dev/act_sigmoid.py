"""Sigmoid over a flat 4 GB float32 vector."""

import torch
import torch.nn as nn

NUMEL = 1073741824


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


def get_inputs():
    return [torch.randn(NUMEL)]


def get_init_inputs():
    return []
