"""EmbeddingBag-like sum: look up 32 ids per bag and sum them (fixed-size bags)."""

import torch
import torch.nn as nn

VOCAB = 65536
DIM = 512
BAGS = 65536
BAG_SIZE = 32


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids).sum(dim=1)


def get_inputs():
    return [torch.randint(0, VOCAB, (BAGS, BAG_SIZE))]


def get_init_inputs():
    return [VOCAB, DIM]
