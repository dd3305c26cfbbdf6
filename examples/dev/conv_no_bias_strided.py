"""Conv2d 96 -> 192 channels, 5x5, stride 2, no bias (our own kernels alone), over a float32 96x160 batch of 48."""

import torch
import torch.nn as nn

BATCH = 48
IN_CHANNELS = 96
OUT_CHANNELS = 192
HEIGHT = 96
WIDTH = 160
KERNEL = 5


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel, stride=2, padding=kernel // 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL]
