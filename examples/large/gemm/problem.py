"""Large problem: a float32 GEMM, (16384 x 4096) @ (4096 x 8192), 1.1 TFLOP; 0.54 GB out.

Inputs are uniform in [0, 1), so every product is positive and float32 rounding stays far below the tolerance
whatever order a kernel sums in."""

import os

import torch
import torch.nn as nn

# Below 1 shrinks the leading dimension (quick runs); the benchmark pins it in the source it evaluates.
SCALE = float(os.environ.get("CUDA_AGENT_BENCH_SCALE", "1.0"))
m = max(1, round(16384 * SCALE))
k = 4096
n = 8192


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(m, k), torch.rand(k, n)]


def get_init_inputs():
    return []
