"""Depthwise 3x3 Conv2d (groups = channels = 256) over a 2 GB float32 feature map."""

import torch
import torch.nn as nn

BATCH = 128
CHANNELS = 256
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]
