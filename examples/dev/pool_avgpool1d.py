"""AvgPool1d (kernel 8, stride 4, overlapping windows) over 4 GB of float32 sequences."""

import torch
import torch.nn as nn

BATCH = 128
CHANNELS = 128
LENGTH = 65536


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size=8, stride=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return []
