"""Large problem: inclusive prefix sum along rows of 4096 float32, 128K rows; 2.1 GB in and out.

Inputs are uniform in [0, 1): the partial sums grow monotonically, so rounding stays far below the tolerance
whatever scan order a kernel uses."""

import os

import torch
import torch.nn as nn

# Below 1 shrinks the leading dimension (quick runs); the benchmark pins it in the source it evaluates.
SCALE = float(os.environ.get("CUDA_AGENT_BENCH_SCALE", "1.0"))
rows = max(1, round((1 << 17) * SCALE))
width = 4096


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=1)


def get_inputs():
    return [torch.rand(rows, width)]


def get_init_inputs():
    return []
