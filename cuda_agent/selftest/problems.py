"""The problem every selftest candidate solves, and the small evaluation settings the suite asks for.

The problem is the materialized transpose of examples/problems/transpose_copy.py, kept here so that an installed
package (no examples/ folder) can run the suite: pure data movement, solvable by copies alone, quick to check.
"""

from __future__ import annotations

import uuid
from typing import Any

from cuda_agent.contracts.candidate import MODEL_NEW_FILE
from cuda_agent.contracts.common import Device

TRANSPOSE_PROBLEM = """
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
"""

# The correct copy-only candidate every hack and attack starts from.
TRANSPOSE_CANDIDATE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)
        out.copy_(x.t())
        return out
"""


def eval_options(device: Device) -> dict[str, Any]:
    """Evaluation settings of the suite's requests: enough trials for the run-time guards (outputs cached after
    the correctness trials, spot checks) to see a hack, few enough to be quick; no baselines (no speedups)."""
    return {
        "device": device.value,
        "correctness_trials": 3,
        "timing_trials": 12,
        "warmup": 2,
        "measure_baselines": False,
    }


def eval_request_options(device: Device) -> dict[str, Any]:
    """``eval_options`` plus a per-child time limit: a wedged candidate is cut off within a minute."""
    return {**eval_options(device), "timeout_s": 60}


def fresh_candidate() -> dict[str, Any]:
    """The correct candidate made unique by a comment: a new build and a new verdict, never a cache hit."""
    source = f"# selftest {uuid.uuid4().hex}\n{TRANSPOSE_CANDIDATE}"
    return {"form": "kernelbench", "files": {MODEL_NEW_FILE: source}}


def evaluation_request(device: Device, candidate: dict[str, Any] | None = None) -> dict[str, Any]:
    """An evaluation of ``candidate`` (default: a fresh correct one) on the transpose problem."""
    return {
        "problem_source": TRANSPOSE_PROBLEM,
        "candidate": candidate or fresh_candidate(),
        **eval_request_options(device),
    }


def slow_candidate(seconds: float) -> dict[str, Any]:
    """A fresh correct candidate whose import sleeps ``seconds``: in its build and in its evaluation, so that a
    fault can be injected while either job runs."""
    source = f"# selftest {uuid.uuid4().hex}\nimport time\n\ntime.sleep({seconds})\n{TRANSPOSE_CANDIDATE}"
    return {"form": "kernelbench", "files": {MODEL_NEW_FILE: source}}
