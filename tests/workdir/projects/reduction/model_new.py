import torch
import torch.nn as nn

from cuda_agent.kernels import load_kernels

_k = load_kernels()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        _k.row_sum(x, out, x.shape[0], x.shape[1])
        return out
