"""diag(d) @ A in float32 with A 8192 x 8192 (eager multiplies by the dense diagonal matrix)."""

import torch
import torch.nn as nn

N = 8192
M = 8192


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, d: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return torch.diag(d) @ a


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
