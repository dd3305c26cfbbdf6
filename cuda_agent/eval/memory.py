"""Memory plan of one problem: what one trial holds, from a pass over the reference on the meta device.

The reference's Model is built and called on ``torch.device("meta")`` (shapes and dtypes only, no memory, no
compute), so the sizes of its parameters, inputs and outputs are known before anything is allocated. A problem
whose single trial cannot fit in the free memory is refused in seconds, naming the sizes, instead of failing
with out-of-memory after minutes. Trials are compared and released one at a time, so one trial is what must fit.
"""

from __future__ import annotations

from typing import Any

import torch

from cuda_agent.eval.child.protocol import MemoryPlan
from cuda_agent.problem import Problem, call_inputs, model_on_meta, on_meta

# Temporaries of the chunked comparison (compare.CHUNK_ELEMENTS in float64 pieces) and allocator slack.
_COMPARE_BYTES = 3 * (1 << 25) * 8
GIB = 1024**3
CPU_ADDRESS_SPACE = 16 * GIB  # RLIMIT_AS of each CPU evaluation child (children.py)


def nbytes(values: Any) -> int:
    """Bytes of the tensors in ``values`` (a tensor, or lists and tuples of them; anything else counts 0)."""
    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, list | tuple):
        return sum(nbytes(v) for v in values)
    return 0


def meta_call(problem: Problem, init_inputs: list[Any]) -> tuple[Any, list[Any], Any]:
    """(model, inputs, outputs) of one call on the meta device: factory calls in ``Model.__init__`` and
    ``get_inputs`` that name no device land there, so shapes and dtypes are known without allocating. Raises
    whatever the problem's code raises there (not every operation has a meta implementation)."""
    with on_meta(), torch.no_grad():
        model = model_on_meta(problem, init_inputs)
        inputs = call_inputs(problem.get_inputs, "get_inputs")
        return model, inputs, model(*inputs)


def plan_trial(problem: Problem, init_inputs: list[Any]) -> MemoryPlan:
    """Sizes from the meta device (``meta_call``); the caller goes on without a plan when that raises."""
    model, inputs, outputs = meta_call(problem, init_inputs)
    params = (
        sum(nbytes(t) for t in [*model.parameters(), *model.buffers()]) if isinstance(model, torch.nn.Module) else 0
    )
    i, o = nbytes(inputs), nbytes(outputs)
    return MemoryPlan(
        input_bytes=i,
        output_bytes=o,
        parameter_bytes=params,
        # Trial inputs, timing base and one scaled copy; its outputs; the shared buffer it owns.
        reference_bytes=params + 2 * i + 2 * o + _COMPARE_BYTES,
        # Pristine and given inputs; outputs, the copies that catch late writes, the previous call's.
        candidate_bytes=params + 2 * i + 3 * o,
    )


def refusal(plan: MemoryPlan, free_bytes: int, where: str) -> str | None:
    """The message refusing a problem whose one trial does not fit in ``free_bytes``, or None."""
    need = plan.reference_bytes + plan.candidate_bytes
    if need <= free_bytes:
        return None
    return (
        f"problem too large for this {where}: one trial needs {need / GIB:.1f} GiB (inputs {plan.input_bytes / GIB:.2f}"
        f" GiB, outputs {plan.output_bytes / GIB:.2f} GiB, parameters {plan.parameter_bytes / GIB:.2f} GiB; "
        f"reference {plan.reference_bytes / GIB:.1f} GiB + candidate {plan.candidate_bytes / GIB:.1f} GiB), "
        f"{free_bytes / GIB:.1f} GiB free"
    )


def free_memory(device: str, memory_fraction: float, host_limit: int | None) -> int:
    """Bytes both children may use together: free device memory (each child is capped at ``memory_fraction``),
    or on CPU the available host memory, each child within its address-space limit."""
    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return int(free * memory_fraction)
    available = _mem_available()
    return min(available, 2 * host_limit) if host_limit else available


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0
