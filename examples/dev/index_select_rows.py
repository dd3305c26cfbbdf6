"""index_select of 1M rows (with repeats) from a 4 GB float32 table."""

import torch
import torch.nn as nn

TABLE_ROWS = 1048576
DIM = 1024
PICKED = 1048576


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.index_select(table, 0, index)


def get_inputs():
    return [torch.randn(TABLE_ROWS, DIM), torch.randint(0, TABLE_ROWS, (PICKED,))]


def get_init_inputs():
    return []
