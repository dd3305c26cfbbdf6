"""Float32 product with a transposed operand: a (4096 x 8192) @ b.T, b stored 4096 x 8192."""

import torch
import torch.nn as nn

M = 4096
K = 8192
N = 4096


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b.T)


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
