"""masked_fill of a 2 GB float32 matrix with a constant where a boolean mask is set."""

import torch
import torch.nn as nn

ROWS = 16384
COLS = 32768
FILL = -10000.0


class Model(nn.Module):
    def __init__(self, fill: float) -> None:
        super().__init__()
        self.fill = fill

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x.masked_fill(mask, self.fill)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.rand(ROWS, COLS) < 0.3]


def get_init_inputs():
    return [FILL]
