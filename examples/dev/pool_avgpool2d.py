"""AvgPool2d 2x2 (stride 2) over a 4 GB float32 feature map."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 256
CHANNELS = 64
HEIGHT = 256
WIDTH = 256


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, 2)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
