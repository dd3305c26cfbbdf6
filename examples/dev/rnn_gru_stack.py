"""A 4-layer bidirectional GRU over 384 steps (batch-first), its last step's features projected by a Linear."""

import torch
import torch.nn as nn

BATCH = 16
STEPS = 384
FEATURES = 96
HIDDEN = 320
LAYERS = 4
CLASSES = 12


class Model(nn.Module):
    def __init__(self, features: int, hidden: int, layers: int, classes: int) -> None:
        super().__init__()
        self.gru = nn.GRU(features, hidden, layers, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out[:, -1, :])


def get_inputs():
    return [torch.randn(BATCH, STEPS, FEATURES)]


def get_init_inputs():
    return [FEATURES, HIDDEN, LAYERS, CLASSES]
