"""LayerNorm over all but the batch dimension (normalized_shape (C, H, W)) of a 2 GB float32 batch of 16."""

import torch
import torch.nn as nn

BATCH = 16
CHANNELS = 128
HEIGHT = 512
WIDTH = 512


class Model(nn.Module):
    def __init__(self, channels: int, height: int, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm((channels, height, width))
        nn.init.normal_(self.norm.weight, 1.0, 0.1)
        nn.init.normal_(self.norm.bias, 0.0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 + self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, HEIGHT, WIDTH]
