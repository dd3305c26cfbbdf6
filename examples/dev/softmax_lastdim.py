"""Softmax over 8192-wide rows of a 2 GB float32 matrix."""

import torch
import torch.nn as nn

ROWS = 65536
COLS = 8192


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [4.0 * torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
