"""Project-form candidate for examples/large/layernorm/problem.py: one warp per row, float4 accesses."""

import torch
import torch.nn as nn

from cuda_agent.kernels import load_kernels


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        nn.init.normal_(self.norm.weight, 1.0, 0.1)
        nn.init.normal_(self.norm.bias, 0.0, 0.1)
        self.kernels = load_kernels()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.shape[-1]
        self.kernels.layernorm(x, self.norm.weight, self.norm.bias, y, x.numel() // cols, cols, self.norm.eps)
        return y
