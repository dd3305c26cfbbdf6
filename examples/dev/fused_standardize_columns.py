"""Standardize each column: (x - mean) / (std + eps) over the rows, 2 GB float32."""

import torch
import torch.nn as nn

ROWS = 65536
COLS = 8192
EPS = 1e-05


class Model(nn.Module):
    def __init__(self, eps: float) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(dim=0)) / (x.std(dim=0) + self.eps)


def get_inputs():
    return [3.0 + 2.0 * torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [EPS]
