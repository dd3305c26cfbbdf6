"""MaxPool1d (kernel 4, stride 2, padding 1) over long float32 sequences, 2 GB in."""

import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 256
LENGTH = 32768
KERNEL = 4
STRIDE = 2
PADDING = 1


class Model(nn.Module):
    def __init__(self, kernel: int, stride: int, padding: int) -> None:
        super().__init__()
        self.pool = nn.MaxPool1d(kernel, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return [KERNEL, STRIDE, PADDING]
