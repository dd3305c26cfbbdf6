"""Helpers shared by the agent tests: a tiny problem, environments on it, policies against a fake server."""

from __future__ import annotations

from typing import Any

from cuda_agent.agent import KernelEnv, OpenAIPolicy
from cuda_agent.contracts.agent import RolloutConfig
from cuda_agent.contracts.common import Device
from tests.fakes.openai_server import FakeOpenAIServer

PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(1024), torch.randn(1024)]


def get_init_inputs():
    return []
"""


def make_env(**config: Any) -> KernelEnv:
    config.setdefault("device", Device.CPU)
    return KernelEnv(PROBLEM, config=RolloutConfig(**config))


def make_policy(server: FakeOpenAIServer, **kwargs: Any) -> OpenAIPolicy:
    kwargs.setdefault("backoff_s", 0.01)
    return OpenAIPolicy(base_url=server.base_url, model="fake-model", api_key="test-key", **kwargs)
