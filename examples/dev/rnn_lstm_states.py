"""A 3-layer LSTM over 640 steps from a learned initial state, returning its last hidden and cell states."""

import torch
import torch.nn as nn

BATCH = 24
STEPS = 640
FEATURES = 160
HIDDEN = 384
LAYERS = 3


class Model(nn.Module):
    def __init__(self, features: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, layers)
        self.h0 = nn.Parameter(0.1 * torch.randn(layers, BATCH, hidden))
        self.c0 = nn.Parameter(0.1 * torch.randn(layers, BATCH, hidden))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, (h, c) = self.lstm(x, (self.h0, self.c0))
        return h, c


def get_inputs():
    return [torch.randn(STEPS, BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES, HIDDEN, LAYERS]
