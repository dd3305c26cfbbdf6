"""Conv2d 64 -> 128 channels, 3x3, padding 1, over a float32 128x128 batch of 64."""

import torch
import torch.nn as nn

BATCH = 64
IN_CHANNELS = 64
OUT_CHANNELS = 128
HEIGHT = 128
WIDTH = 128
KERNEL = 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL]
