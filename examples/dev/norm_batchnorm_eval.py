"""BatchNorm2d in inference form (running statistics, affine) over a 2 GB float32 batch."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 256
CHANNELS = 128
HEIGHT = 128
WIDTH = 128
EPS = 1e-05


class Model(nn.Module):
    def __init__(self, channels: int, eps: float) -> None:
        super().__init__()
        self.register_buffer("running_mean", 0.5 * torch.randn(channels))
        self.register_buffer("running_var", 0.5 + torch.rand(channels))
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # training=False: the running statistics, whatever mode the module is in.
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, training=False, eps=self.eps
        )


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, EPS]
