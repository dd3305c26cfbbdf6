"""Log-softmax over the middle (non-contiguous) dimension of a 2 GB float32 tensor."""

import torch
import torch.nn as nn

BATCH = 128
CLASSES = 4096
INNER = 1024


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=1)


def get_inputs():
    return [4.0 * torch.randn(BATCH, CLASSES, INNER)]


def get_init_inputs():
    return []
