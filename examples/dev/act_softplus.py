"""Softplus with beta 2 and threshold 10 over a 4 GB float32 image batch."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 256
CHANNELS = 64
HEIGHT = 256
WIDTH = 256
BETA = 2.0
THRESHOLD = 10.0


class Model(nn.Module):
    def __init__(self, beta: float, threshold: float) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(x, beta=self.beta, threshold=self.threshold)


def get_inputs():
    return [3.0 * torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [BETA, THRESHOLD]
