"""Sizing: the batch size that puts a composed chain's eager time inside the filter's time window.

Drawn at everyday sizes, most chains run in microseconds on an H200: a synthesis of 1,536 candidates there lost 1,149
to the window's 1 ms floor (median 0.03 ms), so the composer spent most of its time making problems the filter
throws away. Instead, a chain's eager time is estimated from what its ATen operators move and compute, counted on
the meta device (no memory, no kernels), as ``fixed + slope * batch``; the batch dimension is then set so that the
estimate meets a target drawn log-uniformly inside the window. The estimate is a roofline, right within a few times;
the target is drawn away from the window's edges so that the filter, which still measures, keeps most problems.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel, Field
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode


class CostModel(BaseModel):
    """What the target device's eager kernels sustain. The defaults are an H200's at fp32: 2.2 TB/s in elementwise
    kernels (measured: an eager activation over 1 GiB tensors, 4.3 GB in and out, takes 2.02 ms by the filter's
    timer), ~50 TFLOP/s in matmuls and convolutions (exact fp32 matmuls are slower, TF32 convolutions faster)."""

    target_ms: tuple[float, float] = Field((2.0, 20.0), description="Eager time to aim at, drawn log-uniformly.")
    bytes_per_ms: float = Field(2.2e9, description="Memory traffic per millisecond.")
    flops_per_ms: float = Field(5.0e10, description="Floating-point operations per millisecond.")
    launch_ms: float = Field(0.005, description="Cost of one kernel launch in eager mode.")


@dataclass(frozen=True)
class Cost:
    bytes: int
    flops: int
    launches: int

    def ms(self, model: CostModel) -> float:
        return self.bytes / model.bytes_per_ms + self.flops / model.flops_per_ms + self.launches * model.launch_ms


class _Traffic(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's class is untyped
    """Bytes read and written by the operators that run kernels (not views), and how many there are."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.bytes = self.launches = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
            self.bytes += sum(t.numel() * t.element_size() for t in tensors)
            self.launches += 1
        return out


def chain_cost(make: Callable[[], Sequence[Callable[[torch.Tensor], Any]]], shape: tuple[int, ...]) -> Cost:
    """What one eager call of the chain costs on an input of ``shape``; ``make`` builds its callables (on meta)."""
    with torch.device("meta"), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fns = make()  # built outside the counters: parameter initialization is not the forward's work
        x = torch.empty(shape)
        flops, traffic = FlopCounterMode(display=False), _Traffic()
        with flops, traffic:
            for fn in fns:
                x = fn(x)
    return Cost(bytes=traffic.bytes, flops=flops.get_total_flops(), launches=traffic.launches)


def fitted_batch(
    make: Callable[[], Sequence[Callable[[torch.Tensor], Any]]],
    shape: tuple[int, ...],
    largest: int,
    max_elements: int,
    model: CostModel,
    rng: random.Random,
) -> int:
    """The batch (dimension 0 of ``shape``, a power of two) whose estimated eager time is nearest a target drawn in
    ``model.target_ms``, no larger than keeps every tensor (``largest`` elements at this batch) within
    ``max_elements``."""
    low, high = model.target_ms
    target = math.exp(rng.uniform(math.log(low), math.log(high)))
    batch = shape[0]
    at_one = chain_cost(make, shape).ms(model)
    try:
        at_two = chain_cost(make, (2 * batch, *shape[1:])).ms(model)
    except (RuntimeError, ValueError):
        # Dimension 0 is no batch to a later operator (pdist's pairs of rows, then a norm over that many): the
        # chain runs only as drawn.
        return batch
    slope = (at_two - at_one) / batch
    if slope <= 0:
        return batch  # nothing here grows with the batch
    wanted = max(1.0, (target - (at_one - slope * batch)) / slope)
    cap = max(1, max_elements * batch // largest)
    return min(2 ** round(math.log2(wanted)), 2 ** int(math.log2(cap)))
