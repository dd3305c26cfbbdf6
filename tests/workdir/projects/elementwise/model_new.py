import torch
import torch.nn as nn

from cuda_agent.kernels import load_kernels

_k = load_kernels()


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k.silu(x, y, x.numel())
        return y
