"""x * sigmoid(GroupNorm(x)): a GroupNorm feeding a sigmoid gate, float32."""

import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 256
GROUPS = 16
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self, groups: int, channels: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)
        nn.init.normal_(self.norm.weight, 1.0, 0.1)
        nn.init.normal_(self.norm.bias, 0.0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.norm(x))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [GROUPS, CHANNELS]
