"""Project-form candidate for examples/large/bias_silu/problem.py: the broadcast add and SiLU fused."""

import torch
import torch.nn as nn

from cuda_agent.kernels import load_kernels


class ModelNew(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels, 1, 1))
        self.kernels = load_kernels()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        channels, h, w = x.shape[1:]
        self.kernels.bias_silu(x, self.bias, y, x.numel(), h * w, channels)
        return y
