"""Project-form candidate for examples/large/max_indices/problem.py: values and indices from one kernel."""

import torch
import torch.nn as nn

from cuda_agent.kernels import load_kernels


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kernels = load_kernels()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.contiguous()
        rows, cols = x.shape
        values = torch.empty(rows, dtype=x.dtype, device=x.device)
        indices = torch.empty(rows, dtype=torch.int64, device=x.device)
        self.kernels.row_max(x, values, indices, rows, cols)
        return values, indices
