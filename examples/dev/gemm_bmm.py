"""Batched float32 matrix product: 128 products of 1024 x 512 by 512 x 1024."""

import torch
import torch.nn as nn

BATCH = 128
M = 1024
K = 512
N = 1024


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []
