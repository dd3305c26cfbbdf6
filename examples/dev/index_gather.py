"""torch.gather of 2048 columns per row (int64 indices) from a 2 GB float32 matrix."""

import torch
import torch.nn as nn

ROWS = 131072
COLS = 4096
PICKED = 2048


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.gather(x, 1, index)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randint(0, COLS, (ROWS, PICKED))]


def get_init_inputs():
    return []
