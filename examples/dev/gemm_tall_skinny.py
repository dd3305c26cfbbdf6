"""Tall-skinny float32 product: 262144 x 1024 by 1024 x 256."""

import torch
import torch.nn as nn

M = 262144
K = 1024
N = 256


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
