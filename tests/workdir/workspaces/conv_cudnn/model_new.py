import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        return cuda_extension.conv_relu(x, self.conv.weight, self.conv.bias, self.conv.padding[0])
