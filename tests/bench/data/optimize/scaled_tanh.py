"""Tiny CPU problem of the bench gate's test: an elementwise chain, tanh(x) * 2 + y."""

import torch
import torch.nn as nn

ROWS = 256
COLS = 512


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2.0 + y


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
