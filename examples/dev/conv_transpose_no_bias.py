"""ConvTranspose1d 128 -> 64 channels, kernel 7, stride 3, no bias, over float32 sequences of 16384."""

import torch
import torch.nn as nn

BATCH = 32
IN_CHANNELS = 128
OUT_CHANNELS = 64
LENGTH = 16384
KERNEL = 7
STRIDE = 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, LENGTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL, STRIDE]
