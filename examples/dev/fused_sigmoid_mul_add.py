"""sigmoid(x) * y + z over three 1 GB float32 tensors."""

import torch
import torch.nn as nn

NUMEL = 268435456


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * y + z


def get_inputs():
    return [torch.randn(NUMEL) for _ in range(3)]


def get_init_inputs():
    return []
