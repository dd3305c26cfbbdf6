"""SiLU over a 4 GB float32 activation tensor (batch, tokens, channels)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 128
TOKENS = 4096
CHANNELS = 2048


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


def get_inputs():
    return [torch.randn(BATCH, TOKENS, CHANNELS)]


def get_init_inputs():
    return []
