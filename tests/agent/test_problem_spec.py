"""The structured problem a policy reads: shapes from a meta-device pass in a real sandboxed child."""

from __future__ import annotations

import time
from typing import Any

import pytest

from cuda_agent.agent import KernelEnv, run_rollout
from cuda_agent.agent.problem_spec import describe_problem
from cuda_agent.contracts.agent import AssistantTurn, OtherSpec, ProblemSpec, ScalarSpec, TensorSpec, ToolCall
from cuda_agent.contracts.common import Device, TolerancePreset
from tests.agent.agent_fixtures import PROBLEM, make_env

pytestmark = pytest.mark.sandbox

# 4 * 2**32 float32 elements = 64 GiB of inputs, 32 GiB of output: far over the child's 4 GiB memory quota, so the
# spec only comes back if nothing of that size was allocated.
HUGE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.proj = nn.Linear(features, features, bias=False)
        self.scale = scale

    def forward(self, x, y):
        return self.proj(x) * self.scale, (x + y).sum(dim=1)


def get_inputs():
    return [torch.randn(2**20, 2**13), torch.randn(2**20, 2**13, dtype=torch.bfloat16)]


def get_init_inputs():
    return [2**13, 0.5]
"""

NO_META = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, mode):
        return x * float(x.sum().item())  # .item() has no value on the meta device


def get_inputs():
    return [torch.randn(8, 16, dtype=torch.float16), "fast"]


def get_init_inputs():
    return [(1, 2)]
"""


def test_small_problem_through_the_environment() -> None:
    env = make_env(tolerance=TolerancePreset.PAPER)
    spec = env.problem_spec
    assert spec.source == PROBLEM and spec.device is Device.CPU and spec.tolerance is TolerancePreset.PAPER
    assert spec.error == ""
    assert spec.init_inputs == []
    assert spec.inputs == [TensorSpec(shape=[1024], dtype="float32")] * 2
    assert spec.outputs == [TensorSpec(shape=[1024], dtype="float32")]
    assert env.problem_spec is spec  # worked out once per environment


def test_multi_gigabyte_problem_is_described_without_allocating() -> None:
    started = time.monotonic()
    spec = describe_problem(HUGE, Device.CUDA, TolerancePreset.KERNELBENCH)
    assert spec.error == "", spec.error
    assert spec.init_inputs == [ScalarSpec(value=2**13), ScalarSpec(value=0.5)]
    assert spec.inputs == [
        TensorSpec(shape=[2**20, 2**13], dtype="float32"),
        TensorSpec(shape=[2**20, 2**13], dtype="bfloat16"),
    ]
    assert spec.outputs == [
        TensorSpec(shape=[2**20, 2**13], dtype="float32"),
        TensorSpec(shape=[2**20], dtype="float32"),
    ]
    assert time.monotonic() - started < 60


def test_forward_without_meta_support_still_gives_inputs() -> None:
    spec = describe_problem(NO_META, Device.CPU, TolerancePreset.KERNELBENCH)
    assert spec.inputs == [TensorSpec(shape=[8, 16], dtype="float16"), ScalarSpec(value="fast")]
    assert spec.init_inputs == [OtherSpec(type="tuple", repr="(1, 2)")]
    assert spec.outputs is None and "forward on the meta device failed" in spec.error


def test_broken_problem_says_why() -> None:
    spec = describe_problem("import torch\nclass Model(:\n", Device.CPU, TolerancePreset.KERNELBENCH)
    assert spec.inputs == [] and spec.outputs is None
    assert "syntax error at line 2" in spec.error


class SpecReader:
    """A policy that works from the environment's problem spec, never from the prompt."""

    name = "spec-reader"

    def __init__(self) -> None:
        self.spec: ProblemSpec | None = None

    def bind(self, env: KernelEnv) -> None:
        self.spec = env.problem_spec

    def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        assert self.spec is not None, "bound before the first action"
        shapes = [i.shape for i in self.spec.inputs if isinstance(i, TensorSpec)]
        return AssistantTurn(tool_calls=[ToolCall(id="f", name="finish", arguments=f'{{"summary": "{shapes}"}}')])


def test_the_rollout_binds_a_policy_to_its_environment() -> None:
    policy = SpecReader()
    trajectory = run_rollout(make_env(), policy)
    assert trajectory.termination_detail == "[[1024], [1024]]"
