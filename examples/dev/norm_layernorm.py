"""LayerNorm over the last two dimensions (normalized_shape (H, W)) with an affine transform, 4 GB float32."""

import torch
import torch.nn as nn

BATCH = 512
CHANNELS = 64
HEIGHT = 128
WIDTH = 256
EPS = 1e-5


class Model(nn.Module):
    def __init__(self, height: int, width: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm((height, width), eps=eps)
        # Weight and bias vary per position: a kernel that ignores either, or indexes them per row, must fail.
        nn.init.normal_(self.norm.weight, 1.0, 0.1)
        nn.init.normal_(self.norm.bias, 0.0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [HEIGHT, WIDTH, EPS]
