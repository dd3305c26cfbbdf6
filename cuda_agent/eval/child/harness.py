"""What both roles of the evaluation child share: functions captured before any candidate code exists, the
outcome classes of exceptions, and inputs made on the device from seeds."""

from __future__ import annotations

import builtins
import os
import resource
import time
from typing import Any

import torch

from cuda_agent.contracts.candidate import PROBLEM_FILE
from cuda_agent.eval.child.protocol import DTYPES, ChildReport, OutputMeta, Role
from cuda_agent.problem import Problem, ProblemError, call_inputs, load_problem

# Captured before any candidate code can run; the harness calls only these.
perf_counter = time.perf_counter
wall_time = time.time
sleep = time.sleep
manual_seed = torch.manual_seed
clone = torch.Tensor.clone
to = torch.Tensor.to
storage = torch.Tensor.untyped_storage
is_floating = torch.Tensor.is_floating_point
equal = torch.equal
no_grad = torch.no_grad
cuda_sync = torch.cuda.synchronize
open_file = builtins.open
default_device = torch.device

INIT_SEED = 42
# Messages of CUDA faults that poison the context; the child must die, the next evaluation starts clean.
STICKY_CUDA_ERRORS = (
    "illegal memory access",
    "misaligned address",
    "illegal instruction",
    "unspecified launch failure",
    "device-side assert",
    "an illegal",
)


class Stop(Exception):
    """Ends the child's work early; the report already says why."""


def classify(exc: BaseException) -> tuple[str, str]:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0][:500]
    lowered = text.lower()
    if any(s in lowered for s in STICKY_CUDA_ERRORS):
        return "illegal_access", first
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in lowered or "can't allocate memory" in lowered:
        return "out_of_memory", first
    return "runtime_error", first


def flatten(output: Any) -> list[Any]:
    return list(output) if isinstance(output, tuple | list) else [output]


def signature(inputs: list[Any]) -> list[str]:
    return [
        f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else f"{type(x).__name__} {x!r}"[:80]
        for x in inputs
    ]


def meta_of(values: list[Any]) -> list[OutputMeta | None]:
    """Shapes and dtypes of outputs; None for what is not a plain tensor (or has a dtype the protocol lacks)."""
    return [
        OutputMeta(shape=list(v.shape), dtype=str(v.dtype))
        if type(v) is torch.Tensor and str(v.dtype) in DTYPES
        else None
        for v in values
    ]


def make_inputs(problem: Problem, seed: int, device: str) -> list[Any]:
    """``get_inputs()`` seeded, with tensors born on ``device``: the problem's factory calls (torch.rand, randn)
    run under that default device, so the same seed gives the same values in both children (same torch, same
    device) without a host copy. Tensors the problem builds on the CPU explicitly are moved."""
    manual_seed(seed)
    with default_device(device):
        values = call_inputs(problem.get_inputs, "get_inputs")
    return [
        to(v, device) if isinstance(v, torch.Tensor) and v.device.type != device.split(":")[0] else v for v in values
    ]


class ChildRole:
    """Report, failure and device set-up common to the reference and candidate roles."""

    def __init__(self, device: str, memory_fraction: float, role: Role) -> None:
        self.kind = device
        self.device = "cuda:0" if device == "cuda" else "cpu"
        self.memory_fraction = memory_fraction
        self.report = ChildReport(
            role=role,
            status="ok",
            torch_version=torch.__version__,
            cuda_version=torch.version.cuda,
        )

    def fail(self, status: str, message: str) -> None:
        self.report.status = status  # type: ignore[assignment]
        self.report.message = message[:2000]
        raise Stop

    def phase_done(self, name: str) -> None:
        self.report.phases[name] = wall_time()

    def sync(self) -> None:
        if self.kind == "cuda":
            cuda_sync()

    def setup_device(self) -> None:
        if self.kind != "cuda":
            return
        if not torch.cuda.is_available():
            self.fail("runtime_error", "device=cuda but the child sees no CUDA device")
        torch.cuda.set_per_process_memory_fraction(self.memory_fraction, 0)
        self.report.gpu_name = torch.cuda.get_device_properties(0).name

    def peak_memory(self) -> None:
        if self.kind == "cuda" and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            self.report.peak_memory_bytes = int(torch.cuda.max_memory_allocated())
        self.report.peak_host_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

    def load_problem(self, workdir: str) -> tuple[Problem, list[Any]]:
        with open_file(os.path.join(workdir, PROBLEM_FILE)) as f:
            source = f.read()
        try:
            problem = load_problem(source, name="kb_problem")
            init_inputs = call_inputs(problem.get_init_inputs, "get_init_inputs")
        except ProblemError as exc:
            self.fail("problem_error", str(exc))
        return problem, init_inputs
