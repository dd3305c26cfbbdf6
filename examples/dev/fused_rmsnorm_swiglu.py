"""RMSNorm, then a SwiGLU projection silu(h Wg^T) * (h Wu^T), float32 (LLaMA-style MLP in)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
HIDDEN = 4096
INTERMEDIATE = 8192
EPS = 1e-06


class Model(nn.Module):
    def __init__(self, hidden: int, intermediate: int, eps: float) -> None:
        super().__init__()
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.norm_weight
        return F.silu(self.gate(h)) * self.up(h)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, INTERMEDIATE, EPS]
