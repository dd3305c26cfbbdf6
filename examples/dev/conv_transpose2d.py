"""ConvTranspose2d 128 -> 64 channels, 4x4, stride 2 (2x upsampling), float32."""

import torch
import torch.nn as nn

BATCH = 32
IN_CHANNELS = 128
OUT_CHANNELS = 64
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
