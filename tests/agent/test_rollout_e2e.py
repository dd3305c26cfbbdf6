"""Full rollouts through the real compile and eval libraries (project form), driven over HTTP.

The scripted model writes a C++ kernel with a syntax error, compiles, reads the diagnostic, fixes it, verifies
(correct), then tries a wrong "optimization", verifies again (incorrect) and finishes: the rollout must return
the correct candidate, not the last one.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cuda_agent.agent import run_rollout
from cuda_agent.contracts.agent import TerminationReason
from cuda_agent.contracts.common import Device
from tests.agent.agent_fixtures import make_env, make_policy
from tests.fakes.openai_server import FakeOpenAIServer, reply, tool

pytestmark = pytest.mark.sandbox

KERNEL = """#include <cstdint>

extern "C" void add(const float* a, const float* b, float* out, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i]
}
"""
MODEL_NEW = """import torch
import torch.nn as nn
from cuda_agent.kernels import load_kernels


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = load_kernels()

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        self.lib.add(a, b, out, a.numel())
        return out
"""
FIX = {"old_string": "a[i] + b[i]\n", "new_string": "a[i] + b[i];\n"}
BREAK = {"old_string": "a[i] + b[i];", "new_string": "a[i] - b[i];"}

# Write a kernel with a syntax error, compile, fix, verify (correct), break it, verify (incorrect), finish.
SCRIPT = [
    reply(
        "I will write an OpenMP kernel.",
        tool("write_file", path="kernels/add.cpp", content=KERNEL),
        tool("write_file", path="model_new.py", content=MODEL_NEW),
    ),
    reply(tool("compile")),
    reply(tool("edit_file", path="kernels/add.cpp", edits=[FIX])),
    reply(tool("compile")),
    reply(tool("verify")),
    reply("Try something clever.", tool("edit_file", path="kernels/add.cpp", edits=[BREAK]), tool("verify")),
    reply(tool("finish", summary="correct OpenMP add")),
]


def test_rollout_writes_compiles_fixes_verifies_and_keeps_best(fake_openai: Callable[..., FakeOpenAIServer]) -> None:
    server = fake_openai(SCRIPT)
    env = make_env(timing_trials=5, warmup=1, correctness_trials=2, measure_baselines=False)
    traj = run_rollout(env, make_policy(server))

    assert traj.termination is TerminationReason.FINISHED, traj.termination_detail
    obs = [[o.content for o in t.observations] for t in traj.turns]
    assert obs[1][0].startswith("compile: compile_error")
    assert "kernels/add.cpp:5" in obs[1][0] and "expected" in obs[1][0]
    # The model saw the diagnostic in its next prompt.
    assert any("kernels/add.cpp:5" in (m.get("content") or "") for m in server.requests[2]["messages"])
    assert obs[3][0].startswith("compile: ok")
    assert obs[4][0].startswith("verify: correct") and "reward: 1" in obs[4][0]
    assert obs[5][1].startswith("verify: incorrect") and "reward: -1" in obs[5][1]

    events = [(e.turn, e.kind, e.status) for e in traj.reward_events]
    assert events == [
        (1, "compile", "compile_error"),
        (3, "compile", "ok"),
        (4, "verify", "correct"),
        (5, "compile", "ok"),
        (5, "verify", "incorrect"),
    ]
    assert traj.best is not None and traj.best.turn == 4
    assert traj.best.result.correct and traj.best.result.reward == 1.0
    assert "a[i] + b[i];" in traj.best.candidate.files["kernels/add.cpp"]
    assert set(traj.best.candidate.files) == {"model_new.py", "kernels/add.cpp"}


CUDA_KERNEL = """#include <cstdint>
#include <cuda_runtime.h>

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

extern "C" void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
    add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(a, b, out, n);
}
"""


@pytest.mark.gpu
def test_cuda_rollout_compiles_verifies_profiles(fake_openai: Callable[..., FakeOpenAIServer]) -> None:
    script = [
        reply(
            tool("write_file", path="kernels/add.cu", content=CUDA_KERNEL),
            tool("write_file", path="model_new.py", content=MODEL_NEW),
            tool("compile"),
        ),
        reply(tool("verify")),
        reply(tool("profile")),
        reply(tool("finish", summary="cuda add")),
    ]
    server = fake_openai(script)
    traj = run_rollout(make_env(device=Device.CUDA), make_policy(server))
    assert traj.termination is TerminationReason.FINISHED, traj.termination_detail
    obs = [[o.content for o in t.observations] for t in traj.turns]
    assert obs[0][2].startswith("compile: ok"), obs[0][2]
    assert obs[1][0].startswith("verify: correct"), obs[1][0]
    assert "speedup vs eager" in obs[1][0]
    assert obs[2][0].startswith("profile:"), obs[2][0]
    assert traj.best is not None and traj.best.result.correct and traj.best.result.reward is not None
