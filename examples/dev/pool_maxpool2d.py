"""MaxPool2d (3x3, stride 2, padding 1) over a 2 GB float32 feature map."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 64
CHANNELS = 128
HEIGHT = 256
WIDTH = 256


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(x, kernel_size=3, stride=2, padding=1)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
