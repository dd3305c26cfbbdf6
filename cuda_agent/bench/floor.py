"""The in-process floor: KernelBench's work on one problem, reference and candidate in one plain process.

Per problem: build both models (same seed), run correctness trials (fresh seeded inputs, ``torch.allclose``),
then time the candidate with CUDA events (host clock on the CPU), the same inputs for every call, as
KernelBench's harness does. No sandbox, no second process, no files: the least time a harness needs for that
work, which the verdict's wall time is measured against. It runs the candidate's code unsandboxed, so only
trusted candidates belong in a benchmark.

It runs in its own process (``python -m cuda_agent.bench.floor``, a ``FloorRequest`` as JSON on stdin, a
``FloorFigures`` as the last line of stdout): the benchmark process itself must not hold a CUDA context, or the
evaluation's GPU health check would see a foreign process on the GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from pydantic import BaseModel, Field

INIT_SEED = 42  # KernelBench seeds model construction with 42
TRIAL_SEED_BASE = 1000


class FloorRequest(BaseModel):
    problem_source: str
    model_new: str = Field(description="The candidate's model_new.py; its kernels come from CUDA_AGENT_KERNELS_DIR.")
    device: str
    correctness_trials: int = 5
    timing_trials: int = 100
    warmup: int = 10


class FloorFigures(BaseModel):
    error: str | None = Field(None, description="Why the floor could not be measured; then the rest is partial.")
    startup_s: float = Field(0.0, description="Python, torch and the device context: paid once by a harness.")
    setup_s: float = Field(0.0, description="Loading both files and building both models.")
    correctness_s: float = 0.0
    timing_s: float = Field(0.0, description="Warm-up and timed calls.")
    floor_s: float = Field(0.0, description="setup + correctness + timing: what the verdict is compared with.")
    process_wall_s: float = Field(0.0, description="The floor process from start to exit, startup included.")
    correct: bool | None = None
    trials_passed: int = 0
    failure: str | None = Field(None, description="The first disagreement, when correct is False.")
    candidate_median_ms: float | None = None
    candidate_min_ms: float | None = None
    gpu_peak_allocated_bytes: int | None = None


def kernelbench_tolerance(dtype: Any) -> float:
    """atol = rtol of KernelBench's per-precision check: 1e-2 for half types, 1e-4 otherwise. Kept here rather
    than taken from cuda_agent.eval: the floor stands for that harness, whatever ours decides."""
    import torch

    return 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return [v for item in value for v in _flatten(item)]
    return [value]


def _disagreement(got: list[Any], expected: list[Any]) -> str | None:
    import torch

    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if not isinstance(g, torch.Tensor) or not isinstance(e, torch.Tensor):
            return f"output {i} is not a tensor"
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"output {i}: {g.dtype}{list(g.shape)}, expected {e.dtype}{list(e.shape)}"
        if not (e.is_floating_point() or e.is_complex()):
            if not torch.equal(g, e):
                return f"output {i}: integer values differ"
            continue
        tol = kernelbench_tolerance(e.dtype)
        if not torch.allclose(g, e, atol=tol, rtol=tol):
            diff = float((g.float() - e.float()).abs().max())
            return f"output {i}: not allclose at {tol:g}, max abs difference {diff:.3g}"
    return None


def measure_floor(req: FloorRequest) -> FloorFigures:
    import torch

    from cuda_agent.problem import call_inputs, load_candidate, load_problem

    figures = FloorFigures()
    device = torch.device(req.device)
    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    started = time.perf_counter()
    torch.zeros(1, device=device)
    sync()
    figures.startup_s = time.perf_counter() - started

    begin = time.perf_counter()
    problem = load_problem(req.problem_source, name="bench_floor_problem")
    model_new = load_candidate(req.model_new, name="bench_floor_candidate")
    init_inputs = call_inputs(problem.get_init_inputs, "get_init_inputs")
    # Tensors the problem creates without naming a device are made on the device itself (no host copy).
    with torch.device(device):
        torch.manual_seed(INIT_SEED)
        reference = problem.model_cls(*init_inputs).to(device)
        torch.manual_seed(INIT_SEED)
        candidate = model_new(*init_inputs).to(device)

    def inputs_for(seed: int) -> list[Any]:
        torch.manual_seed(seed)
        with torch.device(device):
            values = call_inputs(problem.get_inputs, "get_inputs")
        return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]

    sync()
    figures.setup_s = time.perf_counter() - begin

    mark = time.perf_counter()
    with torch.no_grad():
        for trial in range(req.correctness_trials):
            inputs = inputs_for(TRIAL_SEED_BASE + trial)
            expected = _flatten(reference(*inputs))
            got = _flatten(candidate(*inputs))
            failure = _disagreement(got, expected)
            del inputs, expected, got
            if failure is not None:
                figures.failure = f"trial {trial}: {failure}"
                break
            figures.trials_passed += 1
    sync()
    figures.correct = figures.trials_passed == req.correctness_trials
    figures.correctness_s = time.perf_counter() - mark
    if not figures.correct:  # KernelBench does not time a wrong candidate, nor does the verdict
        figures.floor_s = time.perf_counter() - begin
        return figures

    mark = time.perf_counter()
    samples: list[float] = []
    with torch.no_grad():
        inputs = inputs_for(TRIAL_SEED_BASE)
        for _ in range(req.warmup):
            candidate(*inputs)
        sync()
        for _ in range(req.timing_trials):
            if cuda:
                # torch.cuda.Event's constructor carries no annotations.
                start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                start.record()
                candidate(*inputs)
                end.record()
                torch.cuda.synchronize(device)
                samples.append(start.elapsed_time(end))
            else:
                tick = time.perf_counter()
                candidate(*inputs)
                samples.append((time.perf_counter() - tick) * 1e3)
    figures.timing_s = time.perf_counter() - mark
    figures.floor_s = time.perf_counter() - begin
    samples.sort()
    figures.candidate_median_ms = samples[len(samples) // 2]
    figures.candidate_min_ms = samples[0]
    if cuda:
        figures.gpu_peak_allocated_bytes = int(torch.cuda.max_memory_allocated(device))
    return figures


def run_floor(req: FloorRequest, env: dict[str, str], timeout_s: float) -> FloorFigures:
    """Measure the floor in a fresh process with ``env`` added (the candidate's CUDA_AGENT_KERNELS_DIR)."""
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "cuda_agent.bench.floor"],
            input=req.model_dump_json(),
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return FloorFigures(error=f"floor process ran past {timeout_s:.0f} s", process_wall_s=timeout_s)
    lines = proc.stdout.strip().splitlines()
    try:
        figures = FloorFigures.model_validate_json(lines[-1])
    except (IndexError, ValueError):
        tail = (proc.stderr or proc.stdout).strip()[-600:]
        figures = FloorFigures(error=f"floor process exited {proc.returncode}: {tail}")
    figures.process_wall_s = time.perf_counter() - started
    return figures


def main() -> None:
    req = FloorRequest.model_validate_json(sys.stdin.read())
    try:
        figures = measure_floor(req)
    except Exception as exc:
        figures = FloorFigures(error=f"{type(exc).__name__}: {str(exc)[:500]}")
    print(json.dumps(figures.model_dump(mode="json")))


if __name__ == "__main__":
    main()
