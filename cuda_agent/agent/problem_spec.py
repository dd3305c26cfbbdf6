"""The problem as a policy reads it (``ProblemSpec``): shapes and dtypes of the inputs, init inputs and outputs.

The problem's code is the tenant's, so it runs in a sandboxed child (no network, no GPU, bounded memory and time),
never in the rollout's process, and there on the meta device (``eval.memory.meta_call``): a problem whose inputs
take gigabytes is described without allocating them. Run as ``python -m cuda_agent.agent.problem_spec OUT`` with
the problem source on stdin, the child writes the shapes to OUT as JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cuda_agent.contracts.agent import OtherSpec, ProblemSpec, ScalarSpec, TensorSpec, ValueSpec
from cuda_agent.contracts.common import Device, TolerancePreset

SPEC_TIMEOUT_S = 120.0
REPR_CHARS = 200


def describe_problem(source: str, device: Device, tolerance: TolerancePreset) -> ProblemSpec:
    """The spec of ``source``; what the problem's code could not give (it failed to load, or an operation has no
    meta implementation) is missing and ``error`` says why, so a policy can still fall back on the source."""
    from cuda_agent.sandbox.child import ChildFailed, run_python_child

    spec = ProblemSpec(source=source, device=device, tolerance=tolerance)
    try:
        answer = run_python_child("cuda_agent.agent.problem_spec", source.encode(), timeout_s=SPEC_TIMEOUT_S)
        # The problem's code ran in that child and may have rewritten the answer: it is validated like any input.
        shapes = ProblemSpec.model_validate_json(answer)
    except (ChildFailed, ValidationError) as exc:
        spec.error = f"describing the problem failed: {str(exc).splitlines()[0][:500]}"
        return spec
    return shapes.model_copy(update={"source": source, "device": device, "tolerance": tolerance})


def describe_value(value: Any) -> ValueSpec:
    import torch

    if isinstance(value, torch.Tensor):
        return TensorSpec(shape=list(value.shape), dtype=str(value.dtype).removeprefix("torch."))
    if value is None or isinstance(value, bool | int | float | str):
        return ScalarSpec(value=value)
    return OtherSpec(type=type(value).__name__, repr=repr(value)[:REPR_CHARS])


def _shapes(source: str) -> ProblemSpec:
    """Runs in the sandboxed child. Every step is on the meta device, so nothing the size of the problem exists."""
    from cuda_agent.eval.memory import meta_call
    from cuda_agent.problem import ProblemError, call_inputs, load_problem, on_meta

    # The spec's own fields are the parent's to fill; this pass only reports shapes.
    spec = ProblemSpec(source="", device=Device.CPU, tolerance=TolerancePreset.KERNELBENCH)
    try:
        problem = load_problem(source)
        with on_meta():
            init_inputs = call_inputs(problem.get_init_inputs, "get_init_inputs")
        spec.init_inputs = [describe_value(v) for v in init_inputs]
    except ProblemError as exc:
        spec.error = str(exc)
        return spec
    try:
        _, inputs, outputs = meta_call(problem, init_inputs)
    except Exception as exc:  # an operation without a meta implementation: inputs alone are still known
        spec.error = f"forward on the meta device failed ({type(exc).__name__}: {exc}); outputs unknown"
        try:
            with on_meta():
                inputs = call_inputs(problem.get_inputs, "get_inputs")
        except ProblemError as inner:
            spec.error = str(inner)
            return spec
        spec.inputs = [describe_value(v) for v in inputs]
        return spec
    spec.inputs = [describe_value(v) for v in inputs]
    spec.outputs = [describe_value(v) for v in (outputs if isinstance(outputs, list | tuple) else [outputs])]
    return spec


def main() -> None:
    Path(sys.argv[1]).write_text(_shapes(sys.stdin.read()).model_dump_json())


if __name__ == "__main__":
    main()
