"""Hardswish over a 4 GB float32 feature map, inputs spread over its kinks at -3 and 3."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 512
CHANNELS = 32
HEIGHT = 256
WIDTH = 256


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(x)


def get_inputs():
    return [4.0 * torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
