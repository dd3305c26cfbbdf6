"""A bfloat16 matrix product 8192 x 8192 by 8192 x 16384 (bfloat16 inputs and output)."""

import torch
import torch.nn as nn

M = 8192
K = 8192
N = 16384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
