"""Cosine-similarity matrix of two float32 embedding sets: normalize rows, then A B^T."""

import torch
import torch.nn as nn
import torch.nn.functional as F

N_A = 16384
N_B = 16384
DIM = 1024


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.normalize(a, dim=1) @ F.normalize(b, dim=1).T


def get_inputs():
    return [torch.randn(N_A, DIM), torch.randn(N_B, DIM)]


def get_init_inputs():
    return []
