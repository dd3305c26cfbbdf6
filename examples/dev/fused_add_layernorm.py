"""Residual add then LayerNorm (post-norm transformer block tail), 2 GB float32 each."""

import torch
import torch.nn as nn

BATCH = 32
SEQ = 4096
HIDDEN = 4096


class Model(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        nn.init.normal_(self.norm.weight, 1.0, 0.1)
        nn.init.normal_(self.norm.bias, 0.0, 0.1)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN), torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]
