"""Attention written out: softmax(Q K^T / sqrt(d)) V over 512 heads of 1024 x 64, float32."""

import math

import torch
import torch.nn as nn

BATCH = 32
HEADS = 16
SEQ = 1024
HEAD_DIM = 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, HEAD_DIM) for _ in range(3)]


def get_init_inputs():
    return []
