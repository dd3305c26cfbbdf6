"""Large problem: LayerNorm with a learned affine transform over 1M rows of 1024 float32; 4.3 GB in and out."""

import os

import torch
import torch.nn as nn

# Below 1 shrinks the leading dimension (quick runs); the benchmark pins it in the source it evaluates.
SCALE = float(os.environ.get("CUDA_AGENT_BENCH_SCALE", "1.0"))
rows = max(1, round((1 << 20) * SCALE))
hidden = 1024
eps = 1e-5


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        # Not the identity affine transform: a kernel that ignores weight or bias must fail.
        nn.init.normal_(self.norm.weight, 1.0, 0.1)
        nn.init.normal_(self.norm.bias, 0.0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(rows, hidden)]


def get_init_inputs():
    return [hidden, eps]
