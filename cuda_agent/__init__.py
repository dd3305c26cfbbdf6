"""CUDA Agent: turn PyTorch modules into faster custom-CUDA ``ModelNew`` modules, and train agents to do it."""

__version__ = "0.1.0"
