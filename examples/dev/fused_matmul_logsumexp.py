"""logsumexp over the outputs of Linear 4096 -> 8192 (with bias), one value per row."""

import torch
import torch.nn as nn

BATCH = 16384
IN_FEATURES = 4096
OUT_FEATURES = 8192


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(self.linear(x), dim=1)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
