"""nn.Embedding lookup: 1M token ids into a 131072 x 1024 float32 table (4 GB out)."""

import torch
import torch.nn as nn

VOCAB = 131072
DIM = 1024
BATCH = 128
SEQ = 8192


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ))]


def get_init_inputs():
    return [VOCAB, DIM]
