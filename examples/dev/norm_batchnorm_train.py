"""BatchNorm2d in training form (the batch's statistics per channel) over 64 channels of a 2 GB float32 batch."""

import torch
import torch.nn as nn

BATCH = 128
CHANNELS = 64
HEIGHT = 256
WIDTH = 256


class Model(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        nn.init.normal_(self.bn.weight, 1.0, 0.1)
        nn.init.normal_(self.bn.bias, 0.0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A module in training mode normalizes by the batch's own mean and variance (a channel's 8M values).
        return self.bn(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]
