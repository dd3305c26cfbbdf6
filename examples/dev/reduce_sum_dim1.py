"""Sum over the middle dimension of an 8 GB float32 tensor."""

import torch
import torch.nn as nn

BATCH = 512
REDUCED = 4096
INNER = 1024


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, REDUCED, INNER)]


def get_init_inputs():
    return []
