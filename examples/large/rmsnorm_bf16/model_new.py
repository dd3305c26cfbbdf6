"""Project-form candidate for examples/large/rmsnorm_bf16/problem.py: one warp per row, float32 accumulation."""

import torch
import torch.nn as nn

from cuda_agent.kernels import load_kernels


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.eps = eps
        self.kernels = load_kernels()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.shape[-1]
        self.kernels.rmsnorm(x, self.weight, y, x.numel() // cols, cols, self.eps)
        return y
