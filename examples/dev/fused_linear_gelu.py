"""Linear 4096 -> 16384 with bias, then exact GELU (the MLP up-projection), float32."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
IN_FEATURES = 4096
OUT_FEATURES = 16384


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(TOKENS, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
