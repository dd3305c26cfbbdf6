"""Hyperbolic tangent over a 4 GB float32 tensor."""

import torch
import torch.nn as nn

BATCH = 64
SEQ = 16384
HIDDEN = 1024


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return []
