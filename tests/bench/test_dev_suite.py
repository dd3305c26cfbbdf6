"""The development suite (examples/dev, issue 14): every problem loads, runs on the meta device, is sized for the H200.

Sizes are checked against a roofline estimate of eager PyTorch taken on the meta device (no memory, no compute):
each aten operator the forward dispatches reads its tensor arguments and writes its results at ~3 TB/s, and
its FLOPs (torch's own flop formulas: GEMM, batched GEMM, convolution) run at ~50 TFLOP/s in float32 or
~400 TFLOP/s in 16-bit types. Eager runs the operators one by one, so an elementwise chain pays for every
intermediate; that is what makes fused chains worth a kernel and what the estimate must count.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from cuda_agent.eval.memory import meta_call, nbytes
from cuda_agent.problem import Problem, call_inputs, load_problem, problem_hash

DEV = Path(__file__).resolve().parents[2] / "examples" / "dev"
PROBLEMS = sorted(DEV.glob("*.py"))

BYTES_PER_S = 3.0e12  # H200 HBM3e, what a streaming kernel reaches
FLOPS_PER_S = {torch.float32: 50e12, torch.bfloat16: 400e12, torch.float16: 400e12}
BAND_MS = (1.0, 100.0)
PEAK_LIMIT_BYTES = 40 * 10**9

# File-name prefix -> the least number of problems of that kind.
CATEGORIES = {
    "act": 8,
    "reduce": 5,
    "norm": 5,
    "softmax": 3,
    "pool": 5,
    "gemm": 6,
    "conv": 4,
    "scan": 3,
    "index": 5,
    "rnn": 2,
    "fused": 12,
}
# The operators the suite promises to exercise, as eager PyTorch dispatches them (overload packet names).
REQUIRED_OPS = {
    "relu", "gelu", "silu", "tanh", "sigmoid", "softplus", "hardswish", "leaky_relu",
    "sum", "mean", "amax", "amin", "argmax", "std",
    "native_layer_norm", "native_group_norm", "native_batch_norm", "rsqrt", "linalg_vector_norm",
    "_softmax", "_log_softmax", "logsumexp",
    "max_pool2d_with_indices", "avg_pool2d", "_adaptive_avg_pool2d",
    "mm", "addmm", "bmm", "diag_embed", "convolution",
    "cumsum", "cumprod", "flip", "gather", "index_select", "embedding", "masked_fill",
}  # fmt: skip


@dataclass
class Roofline:
    """What eager PyTorch moves and computes in one forward, and the most memory it holds at once."""

    bytes_moved: int = 0
    flop_seconds: float = 0.0
    live_bytes: int = 0
    peak_bytes: int = 0
    ops: Counter[str] = field(default_factory=Counter)
    seeded_ops: set[str] = field(default_factory=set)

    @property
    def estimate_ms(self) -> float:
        return 1e3 * (self.bytes_moved / BYTES_PER_S + self.flop_seconds)


def _stored_bytes(t: torch.Tensor) -> int:
    """Bytes an operator reads from ``t``: a broadcast (expanded) view reads its storage once, not every copy."""
    return min(nbytes(t), t.untyped_storage().nbytes())


class _RooflineMode(TorchDispatchMode):
    def __init__(self, roofline: Roofline) -> None:
        super().__init__()
        self.r = roofline

    def _release(self, size: int) -> None:
        self.r.live_bytes -= size

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._overloadpacket.__name__
        self.r.ops[name] += 1
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.r.seeded_ops.add(name)
        if func.is_view:  # a view moves nothing and allocates nothing
            return out
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.r.bytes_moved += sum(_stored_bytes(t) for t in inputs) + sum(nbytes(t) for t in outputs)
        if func._overloadpacket in flop_registry:
            flops = flop_registry[func._overloadpacket](*args, **kwargs, out_val=out)
            self.r.flop_seconds += flops / FLOPS_PER_S[outputs[0].dtype]
        for t in outputs:
            # Freed when the last Python reference goes, as eager frees intermediates; a view kept alive beyond
            # its base's Python object is missed, so the peak is a slight underestimate of what eager holds.
            weakref.finalize(t, self._release, nbytes(t))
            self.r.live_bytes += nbytes(t)
        self.r.peak_bytes = max(self.r.peak_bytes, self.r.live_bytes)
        return out


@dataclass
class MetaRun:
    problem: Problem
    model: Any
    inputs: list[Any]
    outputs: Any
    roofline: Roofline


@functools.cache  # a run per problem, shared by the tests (the recurrent problems' cells take tens of seconds)
def run_on_meta(path: Path) -> MetaRun:
    """Load ``path`` with the platform's loader and run it on the meta device, measuring the eager roofline."""
    name = f"dev_{path.stem}"
    problem = load_problem(path.read_text(), name=name, filename=str(path))
    try:
        model, inputs, outputs = meta_call(problem, call_inputs(problem.get_init_inputs, "get_init_inputs"))
        resident = nbytes(inputs) + sum(nbytes(t) for t in [*model.parameters(), *model.buffers()])
        roofline = Roofline(live_bytes=resident, peak_bytes=resident)
        with torch.device("meta"), torch.no_grad(), _RooflineMode(roofline):
            model(*inputs)
    finally:
        sys.modules.pop(name, None)
    return MetaRun(problem, model, inputs, outputs, roofline)


def test_suite_size_and_categories() -> None:
    counts = Counter(p.stem.split("_", 1)[0] for p in PROBLEMS)
    assert len(PROBLEMS) >= 44, [p.name for p in PROBLEMS]
    assert set(counts) == set(CATEGORIES), f"unknown prefixes: {set(counts) - set(CATEGORIES)}"
    short = {c: counts[c] for c, least in CATEGORIES.items() if counts[c] < least}
    assert not short, f"categories with too few problems: {short}"


def test_readme_lists_every_problem() -> None:
    listed = set(re.findall(r"`(\w+)\.py`", (DEV / "README.md").read_text()))
    assert listed == {p.stem for p in PROBLEMS}


def test_no_two_problems_alike() -> None:
    """Neither the platform's content hash nor the syntax tree without docstrings repeats."""

    def skeleton(source: str) -> str:
        tree = ast.parse(source)
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                docstring = body[0].value
                if isinstance(docstring, ast.Constant) and isinstance(docstring.value, str):
                    del body[0]
        return ast.dump(tree)

    sources = [p.read_text() for p in PROBLEMS]
    for key in (problem_hash, skeleton):
        repeated = [k for k, n in Counter(key(s) for s in sources).items() if n > 1]
        assert not repeated, f"{len(repeated)} repeated problems by {key.__name__}"


def test_suite_exercises_the_promised_operators() -> None:
    seen: Counter[str] = Counter()
    for path in PROBLEMS:
        seen.update(run_on_meta(path).roofline.ops)
    assert not REQUIRED_OPS - set(seen), f"never dispatched: {sorted(REQUIRED_OPS - set(seen))}"


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_problem_runs_on_meta_at_a_realistic_size(path: Path) -> None:
    source = path.read_text()
    doc = ast.get_docstring(ast.parse(source))
    assert doc and "\n" not in doc, "a one-line module docstring"
    constants = re.findall(r"^([A-Z][A-Z_0-9]*) = \d", source, re.MULTILINE)
    assert constants, "sizes are module-level constants"
    run = run_on_meta(path)
    assert isinstance(run.model, torch.nn.Module)
    outputs = [t for t in tree_flatten(run.outputs)[0] if isinstance(t, torch.Tensor)]
    assert outputs and all(t.device.type == "meta" for t in outputs), "forward returns tensors"
    assert not [m for m in run.model.modules() if isinstance(m, torch.nn.Dropout)]
    assert not run.roofline.seeded_ops, f"random operators in forward: {run.roofline.seeded_ops}"
    floats = {t.dtype for t in run.inputs if isinstance(t, torch.Tensor) and t.is_floating_point()}
    assert floats <= {torch.float32} or path.stem.endswith(("_bf16", "_fp16")), f"input dtypes {floats}"
    low, high = BAND_MS
    assert low <= run.roofline.estimate_ms <= high, (
        f"eager estimate {run.roofline.estimate_ms:.2f} ms ({run.roofline.bytes_moved / 1e9:.2f} GB moved, "
        f"{run.roofline.flop_seconds * 1e3:.2f} ms of FLOPs) outside {low}-{high} ms"
    )
    assert run.roofline.peak_bytes < PEAK_LIMIT_BYTES, f"peak {run.roofline.peak_bytes / 1e9:.1f} GB"


def test_roofline_counts_every_intermediate_and_the_flops() -> None:
    """The estimate the band relies on: a chain of two elementwise ops moves twice what one does; a GEMM's time is
    its FLOPs over the float32 rate; a broadcast operand is read once."""

    def roofline(fn: Any, *shapes: tuple[int, ...]) -> Roofline:
        r = Roofline()
        with torch.device("meta"), torch.no_grad():
            args = [torch.empty(s) for s in shapes]
            with _RooflineMode(r):
                fn(*args)
        return r

    one = roofline(torch.relu, (1024, 1024))
    assert one.bytes_moved == 2 * 4 * 1024 * 1024 and one.flop_seconds == 0.0
    assert roofline(lambda x: torch.relu(x) * 2.0, (1024, 1024)).bytes_moved == 2 * one.bytes_moved
    mm = roofline(torch.mm, (256, 512), (512, 128))
    assert mm.flop_seconds == pytest.approx(2 * 256 * 512 * 128 / FLOPS_PER_S[torch.float32])
    broadcast = roofline(lambda x, b: x + b.expand(1024, 1024), (1024, 1024), (1, 1024))
    assert broadcast.bytes_moved == 4 * (1024 * 1024 * 2 + 1024)
