"""(x @ w) * scale + residual: a float32 GEMM with a scaled residual epilogue."""

import torch
import torch.nn as nn

M = 8192
K = 8192
N = 8192
SCALE = 0.5


class Model(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, w) * self.scale + residual


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N) / K**0.5, torch.randn(M, N)]


def get_init_inputs():
    return [SCALE]
