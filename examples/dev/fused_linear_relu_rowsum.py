"""Linear 2048 -> 8192, ReLU, then a sum over the features (a reduction epilogue)."""

import torch
import torch.nn as nn

BATCH = 32768
IN_FEATURES = 2048
OUT_FEATURES = 8192


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)).sum(dim=1)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
