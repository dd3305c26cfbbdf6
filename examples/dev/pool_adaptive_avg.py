"""AdaptiveAvgPool2d to 7x7 (uneven windows) over a 4 GB float32 64x64 feature map."""

import torch
import torch.nn as nn

BATCH = 256
CHANNELS = 1024
HEIGHT = 64
WIDTH = 64
OUT_SIZE = 7


class Model(nn.Module):
    def __init__(self, out_size: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((out_size, out_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [OUT_SIZE]
