"""Project-form candidate for examples/large/sum_dim1/problem.py: a column-wise reduction, one thread per four
output columns."""

import torch
import torch.nn as nn

from cuda_agent.kernels import load_kernels


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kernels = load_kernels()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        batch, reduce, cols = x.shape
        y = torch.empty(batch, cols, dtype=x.dtype, device=x.device)
        self.kernels.sum_dim1(x, y, batch, reduce, cols)
        return y
