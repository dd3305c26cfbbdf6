"""Composers: chains of 1-5 catalogued operators written as KernelBench problem files.

The programmatic composer is a pure function of (seed, index, catalogue, options): problem ``index`` draws from
its own ``random.Random(f"{seed}:{index}")``, so a problem does not depend on how many came before it or on the
order they were made in, and the same seed always gives the same problems. Shapes and dtypes are propagated
through each operator on the meta device (no memory, no compute), and the written file is loaded and run on the
meta device once more, so a file the composer hands out is known to be shape-consistent.

The LLM composer asks any OpenAI-compatible endpoint to write the problem around a chain the programmatic composer
validated, and records the prompt and the response with it.
"""

from __future__ import annotations

import math
import random
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel, Field

from cuda_agent.dataset.crawl import Catalogue, OperatorKind, OperatorSpec, ParamRole, build_callable
from cuda_agent.dataset.sizing import CostModel, fitted_batch
from cuda_agent.eval.memory import meta_call
from cuda_agent.problem import load_problem, problem_hash

# The op-count mix of CUDA-Agent-Ops-6K (the paper's released set), fused problems only.
PAPER_OP_COUNTS: dict[int, float] = {1: 0.034, 2: 0.838, 3: 0.076, 4: 0.028, 5: 0.012}

# Names of the input's dimensions by rank, for the module-level size constants.
_DIM_NAMES: dict[int, tuple[str, ...]] = {
    1: ("FEATURES",),
    2: ("BATCH_SIZE", "FEATURES"),
    3: ("BATCH_SIZE", "CHANNELS", "LENGTH"),
    4: ("BATCH_SIZE", "CHANNELS", "HEIGHT", "WIDTH"),
    5: ("BATCH_SIZE", "CHANNELS", "DEPTH", "HEIGHT", "WIDTH"),
}


class CompositionError(ValueError):
    """A chain that cannot be composed; the message names the operator and why."""


class ShapeOptions(BaseModel):
    """Sizes the composer draws from. The defaults are GPU-sized: the batch is then fitted to an eager time (see
    ``sizing``); tests and CPU runs pass small ones, as drawn."""

    batch: list[int] = Field(
        default_factory=lambda: [16], description="Batch sizes; with a fit, the batch a chain is drawn at, then fitted."
    )
    channels: list[int] = Field(default_factory=lambda: [16, 32, 64, 128], description="Channel counts.")
    features: list[int] = Field(default_factory=lambda: [256, 512, 1024, 2048], description="Feature widths.")
    spatial: list[int] = Field(default_factory=lambda: [32, 64, 128], description="Lengths, heights, widths.")
    depth: list[int] = Field(default_factory=lambda: [8, 16, 32], description="Depths of 5-D inputs.")
    kernel: list[int] = Field(default_factory=lambda: [1, 3, 5], description="Kernel sizes.")
    max_elements: int = Field(2**28, description="Largest tensor (elements) any step may produce.")
    fit: CostModel | None = Field(
        default_factory=CostModel, description="Batch fitted to an estimated eager time; None: the drawn batch."
    )


# Shapes for CPU runs and tests: each problem runs in microseconds, so the filters' cost is compilation alone.
SMALL_SHAPES = ShapeOptions(
    batch=[2, 4], channels=[4, 8], features=[16, 32], spatial=[8, 16], depth=[4], kernel=[1, 3], fit=None
)


class ComposeOptions(BaseModel):
    op_counts: dict[int, float] = Field(
        default_factory=lambda: dict(PAPER_OP_COUNTS), description="Weight of each chain length (1-5)."
    )
    shapes: ShapeOptions = Field(default_factory=ShapeOptions)
    allow_stochastic: bool = Field(False, description="Let stochastic operators into chains (the filter drops them).")
    include: list[str] | None = Field(None, description="Only these operators (qualified names); None: all.")
    exclude: list[str] = Field(default_factory=list, description="Never these operators (qualified names).")
    anchor_weight: float = Field(4.0, description="How much likelier a chain opens on a self-sizing operator.")
    tries_per_step: int = Field(12, description="Operators tried at a step before the chain is given up.")


class LLMExchange(BaseModel):
    base_url: str
    model: str
    temperature: float
    prompt: list[dict[str, str]]
    response: str


class ComposedProblem(BaseModel):
    index: int
    seed: int
    code: str
    ops: list[str]
    data_source: str = Field(description="torch#<version> of the catalogue the operators came from.")
    composer: str = Field(description="programmatic, or llm:<model>.")
    source_hash: str
    llm: LLMExchange | None = None

    @property
    def op_count(self) -> int:
        return len(self.ops)


class CompositionFailure(BaseModel):
    index: int
    seed: int
    reason: str


@dataclass
class _Step:
    op: OperatorSpec
    kwargs: dict[str, Any]
    size_params: list[str]  # the kwargs that become constants and Model.__init__ arguments
    out_shape: tuple[int, ...]


def problem_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"{seed}:{index}")


def draw_op_count(rng: random.Random, weights: dict[int, float]) -> int:
    counts = sorted(weights)
    return rng.choices(counts, weights=[weights[c] for c in counts])[0]


def _input_shape(rank: int, rng: random.Random, shapes: ShapeOptions) -> tuple[int, ...]:
    by_name = {
        "BATCH_SIZE": shapes.batch,
        "FEATURES": shapes.features,
        "CHANNELS": shapes.channels,
        "LENGTH": shapes.spatial,
        "HEIGHT": shapes.spatial,
        "WIDTH": shapes.spatial,
        "DEPTH": shapes.depth,
    }
    return tuple(rng.choice(by_name[name]) for name in _DIM_NAMES[rank])


def _bind(op: OperatorSpec, shape: tuple[int, ...], rng: random.Random, shapes: ShapeOptions) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for p in op.params:
        if p.role is ParamRole.INPUT_CHANNELS:
            if len(shape) < 2:
                raise CompositionError(f"{op.name}: {p.name} needs a channel dimension, input is {list(shape)}")
            kwargs[p.name] = shape[1]
        elif p.role is ParamRole.INPUT_FEATURES:
            kwargs[p.name] = shape[-1]
        elif p.role is ParamRole.OUTPUT_SIZE:
            kwargs[p.name] = rng.choice(shapes.features if "features" in p.name else shapes.channels)
        elif p.role is ParamRole.KERNEL:
            kwargs[p.name] = rng.choice(shapes.kernel)
        elif p.role is ParamRole.GROUPS:
            channels = shape[1] if len(shape) > 1 else 1
            kwargs[p.name] = rng.choice([g for g in (1, 2, 4, 8) if channels % g == 0])
        else:
            kwargs[p.name] = p.value
    return kwargs


def propagate(op: OperatorSpec, kwargs: dict[str, Any], shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The operator's output for an input of ``shape`` on the meta device; CompositionError naming why not."""
    try:
        with torch.device("meta"), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = build_callable(op, kwargs)(torch.empty(shape, dtype=dtype))
    except Exception as exc:
        raise CompositionError(f"{op.name} on {list(shape)}: {type(exc).__name__}: {exc}") from None
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise CompositionError(f"{op.name} on {list(shape)}: output is not a floating tensor")
    return out


def _check_output(op: OperatorSpec, out: torch.Tensor, shapes: ShapeOptions) -> None:
    if out.numel() == 0 or out.dim() not in _DIM_NAMES:
        raise CompositionError(f"{op.name}: output shape {list(out.shape)} is empty or of rank outside 1-5")
    if out.numel() > shapes.max_elements:
        raise CompositionError(f"{op.name}: output of {out.numel()} elements exceeds {shapes.max_elements}")


def _pool(catalogue: Catalogue, options: ComposeOptions) -> list[OperatorSpec]:
    include = set(options.include) if options.include is not None else None
    return [
        op
        for op in catalogue.operators
        if (options.allow_stochastic or not op.stochastic)
        and (include is None or op.name in include)
        and op.name not in options.exclude
    ]


_SIZE_ROLES = {ParamRole.INPUT_CHANNELS, ParamRole.INPUT_FEATURES, ParamRole.OUTPUT_SIZE, ParamRole.KERNEL}


def _step(op: OperatorSpec, kwargs: dict[str, Any], shape: tuple[int, ...], shapes: ShapeOptions) -> _Step:
    """``op`` with ``kwargs`` on an input of ``shape``: its output shape, checked against the limits."""
    out = propagate(op, kwargs, shape, torch.float32)
    _check_output(op, out, shapes)
    sized = [p.name for p in op.params if p.role in _SIZE_ROLES and op.kind is OperatorKind.MODULE]
    return _Step(op, kwargs, sized, tuple(out.shape))


def _chain_steps(
    ops: Sequence[OperatorSpec], shape: tuple[int, ...], rng: random.Random, shapes: ShapeOptions
) -> list[_Step]:
    steps: list[_Step] = []
    for op in ops:
        steps.append(_step(op, _bind(op, shape, rng, shapes), shape, shapes))
        shape = steps[-1].out_shape
    return steps


def _fit_batch(
    shape: tuple[int, ...], steps: list[_Step], rng: random.Random, shapes: ShapeOptions
) -> tuple[tuple[int, ...], list[_Step]]:
    """The chain with its batch fitted to ``shapes.fit`` (the same operators and arguments, shapes propagated
    again); as drawn without a fit or a batch dimension."""
    if shapes.fit is None or len(shape) < 2:
        return shape, steps
    largest = max(math.prod(s) for s in [shape, *(step.out_shape for step in steps)])

    def make() -> list[Any]:
        return [build_callable(step.op, step.kwargs) for step in steps]

    fitted = fitted_batch(make, shape, largest, shapes.max_elements, shapes.fit, rng)
    # Not every operator reads dimension 0 as a batch (a 2-D input to Conv1d is one unbatched sample), and there the
    # estimate's linear growth is wrong: halve towards the drawn batch until the chain fits again.
    while True:
        try:
            return (fitted, *shape[1:]), _propagated(steps, (fitted, *shape[1:]), shapes)
        except CompositionError:
            if fitted <= shape[0]:
                return shape, steps
            fitted = max(shape[0], fitted // 2)


def _propagated(steps: list[_Step], shape: tuple[int, ...], shapes: ShapeOptions) -> list[_Step]:
    """The same operators and arguments on an input of ``shape``."""
    out_steps: list[_Step] = []
    for step in steps:
        out_steps.append(_step(step.op, step.kwargs, shape, shapes))
        shape = out_steps[-1].out_shape
    return out_steps


def _opening_ranks(op: OperatorSpec) -> list[int]:
    return [r for r in op.ranks if r > 1] or op.ranks


def _is_anchor(op: OperatorSpec) -> bool:
    return any(p.role in (ParamRole.INPUT_CHANNELS, ParamRole.INPUT_FEATURES) for p in op.params)


def _draw_chain(
    count: int, rng: random.Random, pool: list[OperatorSpec], options: ComposeOptions
) -> tuple[tuple[int, ...], list[_Step]]:
    """Draw a first operator and input, then each next operator among those that accept the running shape."""
    # A chain opens on an operator that sizes itself from its input (a convolution, a linear layer, a norm) more
    # often than on an activation, as the paper's fused problems mostly do; a batch dimension is kept when the
    # operator accepts one.
    weights = [options.anchor_weight if _is_anchor(op) else 1.0 for op in pool]
    first = rng.choices(pool, weights=weights)[0]
    shape = _input_shape(rng.choice(_opening_ranks(first)), rng, options.shapes)
    ops = [first]
    steps = _chain_steps(ops, shape, rng, options.shapes)
    while len(steps) < count:
        rank = len(steps[-1].out_shape)
        fitting = [op for op in pool if rank in op.ranks]
        rng.shuffle(fitting)
        for candidate in fitting[: options.tries_per_step]:
            try:
                steps += _chain_steps([candidate], steps[-1].out_shape, rng, options.shapes)
                break
            except CompositionError:
                continue
        else:
            raise CompositionError(f"no operator fits after {steps[-1].op.name} (output {list(steps[-1].out_shape)})")
    return _fit_batch(shape, steps, rng, options.shapes)


def _attribute_names(steps: list[_Step]) -> list[str]:
    names: list[str] = []
    for step in steps:
        base = re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", step.op.short_name).lower()
        name, n = base, 2
        while name in names:
            name, n = f"{base}_{n}", n + 1
        names.append(name)
    return names


def render_problem(shape: tuple[int, ...], steps: list[_Step]) -> str:
    """KernelBench source: size constants, ``Model`` whose sizes come through ``get_init_inputs``."""
    constants = [f"{name} = {size}" for name, size in zip(_DIM_NAMES[len(shape)], shape, strict=True)]
    init_args: list[str] = []
    init_lines: list[str] = []
    forward_lines: list[str] = []
    for step, attr in zip(steps, _attribute_names(steps), strict=True):
        args = []
        for key, value in step.kwargs.items():
            if key in step.size_params:
                constants.append(f"{attr.upper()}_{key.upper()} = {value!r}")
                init_args.append(f"{attr}_{key}")
                args.append(f"{key}={attr}_{key}")
            else:
                args.append(f"{key}={value!r}")
        if step.op.kind is OperatorKind.MODULE:
            init_lines.append(f"        self.{attr} = nn.{step.op.short_name}({', '.join(args)})")
            forward_lines.append(f"        x = self.{attr}(x)")
        else:
            forward_lines.append(f"        x = F.{step.op.short_name}({', '.join(['x', *args])})")
    chain = " -> ".join(step.op.short_name for step in steps)
    signature = ", ".join(["self", *init_args])
    return "\n".join(
        [
            "import torch",
            "import torch.nn as nn",
            "import torch.nn.functional as F",
            "",
            *constants,
            "",
            "",
            "class Model(nn.Module):",
            f'    """{chain}."""',
            "",
            f"    def __init__({signature}):",
            "        super().__init__()",
            *init_lines,
            "",
            "    def forward(self, x):",
            *forward_lines,
            "        return x",
            "",
            "",
            "def get_inputs():",
            f"    return [torch.randn({', '.join(_DIM_NAMES[len(shape)])})]",
            "",
            "",
            "def get_init_inputs():",
            f"    return [{', '.join(arg.upper() for arg in init_args)}]",
            "",
        ]
    )


def check_on_meta(code: str, expected: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Load the file and run it once on the meta device; the output shape, or CompositionError with the reason."""
    try:
        problem = load_problem(code, name="kb_composed")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, _, out = meta_call(problem, list(problem.get_init_inputs()))
    except Exception as exc:  # whatever the file raises on meta is the reason it is rejected
        raise CompositionError(f"the written problem does not run on the meta device: {exc}") from None
    if not isinstance(out, torch.Tensor):
        raise CompositionError("the written problem does not return one tensor")
    if expected is not None and tuple(out.shape) != expected:
        raise CompositionError(f"the written problem gives shape {list(out.shape)}, propagation said {list(expected)}")
    return tuple(out.shape)


def compose_chain(
    op_names: Sequence[str], catalogue: Catalogue, seed: int = 0, options: ComposeOptions | None = None
) -> str:
    """The problem chaining exactly ``op_names`` (on the first operator's lowest rank with a batch dimension);
    CompositionError naming the operator that does not fit."""
    options = options or ComposeOptions()
    rng = problem_rng(seed, 0)
    ops = [catalogue.get(name) for name in op_names]
    shape = _input_shape(_opening_ranks(ops[0])[0], rng, options.shapes)
    shape, steps = _fit_batch(shape, _chain_steps(ops, shape, rng, options.shapes), rng, options.shapes)
    code = render_problem(shape, steps)
    check_on_meta(code, steps[-1].out_shape)
    return code


def compose_one(
    seed: int, index: int, catalogue: Catalogue, options: ComposeOptions
) -> ComposedProblem | CompositionFailure:
    """Problem ``index`` of the set drawn with ``seed``: the same arguments always give the same problem."""
    rng = problem_rng(seed, index)
    pool = _pool(catalogue, options)
    if not pool:
        return CompositionFailure(index=index, seed=seed, reason="no operator left after include/exclude")
    try:
        shape, steps = _draw_chain(draw_op_count(rng, options.op_counts), rng, pool, options)
        code = render_problem(shape, steps)
        check_on_meta(code, steps[-1].out_shape)
    except CompositionError as exc:
        return CompositionFailure(index=index, seed=seed, reason=str(exc))
    return ComposedProblem(
        index=index,
        seed=seed,
        code=code,
        ops=[s.op.name for s in steps],
        data_source=catalogue.provenance,
        composer="programmatic",
        source_hash=problem_hash(code),
    )


_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)

_SYSTEM_PROMPT = (
    "You write PyTorch benchmark problems in the KernelBench format: module-level size constants, "
    "`class Model(nn.Module)` whose constructor takes its sizes as arguments, `get_inputs()` returning the list of "
    "input tensors and `get_init_inputs()` returning the constructor arguments. Use only deterministic operators. "
    "Reply with exactly one ```python code block and nothing else."
)


class LLMComposer:
    """Problems written by a chat model through an OpenAI-compatible endpoint around a validated chain."""

    def __init__(
        self, base_url: str, model: str, api_key: str = "EMPTY", temperature: float = 0.7, timeout_s: float = 120.0
    ) -> None:
        from openai import OpenAI

        self.base_url, self.model, self.temperature = base_url, model, temperature
        self.client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=1)

    def prompt(self, ops: list[str], shape: tuple[int, ...]) -> list[dict[str, str]]:
        dims = ", ".join(f"{n}={s}" for n, s in zip(_DIM_NAMES[len(shape)], shape, strict=True))
        return [
            {"role": "system", "content": _SYSTEM_PROMPT},
            {
                "role": "user",
                "content": f"Write a problem whose forward applies, in this order: {', '.join(ops)}. "
                f"The single input has shape ({dims}), dtype float32.",
            },
        ]

    def compose_one(
        self, seed: int, index: int, catalogue: Catalogue, options: ComposeOptions
    ) -> ComposedProblem | CompositionFailure:
        rng = problem_rng(seed, index)
        pool = _pool(catalogue, options)
        try:
            shape, steps = _draw_chain(draw_op_count(rng, options.op_counts), rng, pool, options)
        except CompositionError as exc:
            return CompositionFailure(index=index, seed=seed, reason=str(exc))
        ops = [s.op.name for s in steps]
        messages = self.prompt(ops, shape)
        try:
            completion = self.client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=self.temperature,
                seed=seed * 1_000_003 + index,
            )
        except Exception as exc:  # the endpoint's failure is this problem's failure, reported with its reason
            return CompositionFailure(index=index, seed=seed, reason=f"LLM request failed: {exc}")
        text = completion.choices[0].message.content or ""
        match = _CODE_BLOCK.search(text)
        if match is None:
            return CompositionFailure(index=index, seed=seed, reason="LLM response has no python code block")
        code = match.group(1).strip() + "\n"
        return ComposedProblem(
            index=index,
            seed=seed,
            code=code,
            ops=ops,
            data_source=catalogue.provenance,
            composer=f"llm:{self.model}",
            source_hash=problem_hash(code),
            llm=LLMExchange(
                base_url=self.base_url, model=self.model, temperature=self.temperature, prompt=messages, response=text
            ),
        )
