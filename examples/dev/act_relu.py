"""ReLU over a 4 GB float32 matrix."""

import torch
import torch.nn as nn

ROWS = 32768
COLS = 32768


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
