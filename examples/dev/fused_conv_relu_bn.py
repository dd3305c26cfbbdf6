"""Conv2d 3x3 (32 -> 64), ReLU, then BatchNorm in inference form, float32."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 128
IN_CHANNELS = 32
OUT_CHANNELS = 64
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.register_buffer("running_mean", 0.2 + 0.1 * torch.randn(out_channels))
        self.register_buffer("running_var", 0.1 + 0.2 * torch.rand(out_channels))
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(out_channels))
        self.bias = nn.Parameter(0.1 * torch.randn(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        return F.batch_norm(y, self.running_mean, self.running_var, self.weight, self.bias, training=False)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
