"""A dense block's transition: four feature maps concatenated along channels, BatchNorm (batch statistics), ReLU."""

import torch
import torch.nn as nn

BATCH = 96
PIECE_CHANNELS = 128
PIECES = 4
HEIGHT = 56
WIDTH = 56


class Model(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(torch.cat([a, b, c, d], dim=1)))


def get_inputs():
    return [torch.randn(BATCH, PIECE_CHANNELS, HEIGHT, WIDTH) for _ in range(PIECES)]


def get_init_inputs():
    return [PIECES * PIECE_CHANNELS]
