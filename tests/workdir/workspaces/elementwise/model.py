import torch
import torch.nn as nn


class Model(nn.Module):
    """SiLU: x * sigmoid(x)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(16384, 16384)]


def get_init_inputs():
    return []
