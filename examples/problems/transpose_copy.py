"""Example problem: a materialized transpose. Pure data movement, so a candidate can solve it with copies alone,
which makes it the base of the CPU regression tests of the evaluation harness."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()


rows = 256
cols = 128


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
