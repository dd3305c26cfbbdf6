"""Square float32 matrix product, 8192 x 8192 by 8192 x 8192."""

import torch
import torch.nn as nn

N = 8192


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.mm(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
