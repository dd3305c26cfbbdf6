"""Elementwise chain of four: tanh(x * a + b) * c with scalar constants, 1 GB float32."""

import torch
import torch.nn as nn

ROWS = 16384
COLS = 16384
A = 0.75
B = -0.25
C = 1.5


class Model(nn.Module):
    def __init__(self, a: float, b: float, c: float) -> None:
        super().__init__()
        self.a, self.b, self.c = a, b, c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * self.a + self.b) * self.c


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [A, B, C]
