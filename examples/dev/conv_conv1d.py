"""Conv1d 128 -> 256 channels, kernel 5, padding 2, over float32 sequences of 16384."""

import torch
import torch.nn as nn

BATCH = 64
IN_CHANNELS = 128
OUT_CHANNELS = 256
LENGTH = 16384
KERNEL = 5


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, LENGTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL]
