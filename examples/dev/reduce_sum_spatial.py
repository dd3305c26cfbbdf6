"""Sum over both spatial dimensions of an 8 GB float32 feature map (global sum pooling)."""

import torch
import torch.nn as nn

BATCH = 512
CHANNELS = 256
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=(2, 3))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
