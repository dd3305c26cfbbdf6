"""The author's graph: aten-level operations with static shapes and dtypes, classified by how they can be fused.

Every value is a ``Node``. Pointwise and view nodes are inlined into the kernels that read them; reductions, heavy
contractions and the graph's outputs are the points where values may be materialized (see plan.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Unsupported(ValueError):
    """The computation holds something the author cannot express; str() names it, e.g. ``aten.cumsum``."""


class OpKind(StrEnum):
    INPUT = "input"  # a forward argument
    PARAM = "param"  # a parameter or buffer of the module, by its qualified name
    CONST = "const"  # a scalar filled over a shape (full, scalar_tensor)
    POINTWISE = "pointwise"
    VIEW = "view"  # reshape, permute, expand, slice, select: a change of indexing, no arithmetic
    REDUCTION = "reduction"  # sum / amax / amin / prod over some dims
    CONTRACTION = "contraction"  # mm / bmm: vendor libraries or our tiled kernels, never inlined
    CONVOLUTION = "convolution"  # convolution, also transposed and grouped: cuDNN or our direct loops, never inlined
    INDEX = "index"  # reads a source at data-dependent or piecewise coordinates: embedding, gather, cat, iota
    WINDOW = "window"  # a reduction over a sliding window of a materialized source: pooling
    SCAN = "scan"  # cumulative sum / product along one dim, written by a kernel of its own
    RECURRENCE = "recurrence"  # a recurrent layer's steps after its input's projection (capture.recurrence)


# Gates of a recurrent layer's cell by mode (a RECURRENCE node's attrs["mode"]): rows of its weights per hidden unit.
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}

# IR pointwise op -> C expression template over the arguments {0}, {1}, ... Every template computes in the
# node's C type; comparisons yield bool. Names are aten's (overload packet names), shared by aten and prims.
UNARY: dict[str, str] = {
    "abs": "fabs({0})",
    "neg": "(-({0}))",
    "exp": "exp({0})",
    "exp2": "exp2({0})",
    "expm1": "expm1({0})",
    "log": "log({0})",
    "log2": "log2({0})",
    "log10": "log10({0})",
    "log1p": "log1p({0})",
    "sqrt": "sqrt({0})",
    "rsqrt": "(1 / sqrt({0}))",
    "reciprocal": "(1 / ({0}))",
    "sin": "sin({0})",
    "cos": "cos({0})",
    "tan": "tan({0})",
    "tanh": "tanh({0})",
    "asin": "asin({0})",
    "acos": "acos({0})",
    "atan": "atan({0})",
    "sinh": "sinh({0})",
    "cosh": "cosh({0})",
    "erf": "erf({0})",
    "erfc": "erfc({0})",
    "floor": "floor({0})",
    "ceil": "ceil({0})",
    "trunc": "trunc({0})",
    "round": "nearbyint({0})",
    "sign": "(({0}) > 0 ? 1 : (({0}) < 0 ? -1 : 0))",
    "sigmoid": "(1 / (1 + exp(-({0}))))",
    "relu": "(({0}) < 0 ? 0 : ({0}))",  # a NaN kept, as torch's
    "silu": "(({0}) / (1 + exp(-({0}))))",
    "mish": "(({0}) * tanh(({0}) > 20 ? ({0}) : log1p(exp({0}))))",
    "logical_not": "(!({0}))",
    "bitwise_not": "(~({0}))",  # of integers (capture.py makes a bool's a logical_not)
    "isnan": "isnan({0})",
    "float_bits": "float_bits({0})",  # float32 -> int32, the bits as they are
    "alias": "({0})",
    "clone": "({0})",
    "detach": "({0})",  # torch 2.11's trace leaves some in (argmax's packed keys): no autograd here, a value as is
}
BINARY: dict[str, str] = {
    "add": "(({0}) + ({1}))",
    "sub": "(({0}) - ({1}))",
    "mul": "(({0}) * ({1}))",
    "div": "(({0}) / ({1}))",
    "pow": "pow({0}, {1})",
    "maximum": "max_nan({0}, {1})",
    "minimum": "min_nan({0}, {1})",
    "atan2": "atan2({0}, {1})",
    "fmod": "fmod({0}, {1})",
    "remainder": "(({0}) - floor(({0}) / ({1})) * ({1}))",
    "eq": "(({0}) == ({1}))",
    "ne": "(({0}) != ({1}))",
    "lt": "(({0}) < ({1}))",
    "le": "(({0}) <= ({1}))",
    "gt": "(({0}) > ({1}))",
    "ge": "(({0}) >= ({1}))",
    "logical_and": "(({0}) && ({1}))",
    "logical_or": "(({0}) || ({1}))",
    "bitwise_and": "(({0}) & ({1}))",
    "bitwise_or": "(({0}) | ({1}))",
    "bitwise_xor": "(({0}) ^ ({1}))",
    "where": "(({0}) ? ({1}) : ({2}))",
}
# Float math on the special-function units, as Triton's float code (torch.compile's) computes it, for the search's
# math=fast variants, which the verifier judges like any other. __expf is ex2.approx of x * log2(e): at most
# 2 + 1.2|x| ulp (under 6e-6 relative for any finite float result); __fdividef, 2 ulp (0 for a divisor past
# 2^126). The accurate forms are a dozen instructions each, a range check and a slow path besides.
FAST_FLOAT: dict[str, str] = {
    "exp": "__expf({0})",
    "sigmoid": "__fdividef(1.0f, 1.0f + __expf(-({0})))",
    "silu": "__fdividef({0}, 1.0f + __expf(-({0})))",
    "div": "__fdividef({0}, {1})",
}
# Reductions: (identity of the accumulator as a C expression, combine of acc and v, block-combine operator name).
REDUCTIONS: dict[str, tuple[str, str]] = {
    "sum": ("0", "{a} + {v}"),
    "prod": ("1", "{a} * {v}"),
    "amax": ("-INFINITY", "max_nan({a}, {v})"),
    "amin": ("INFINITY", "min_nan({a}, {v})"),
    "logaddexp": ("-INFINITY", "log_add_exp({a}, {v})"),  # logcumsumexp's scan (the preludes define it)
}


def reduction(op: str, ctype: str) -> tuple[str, str]:
    """(identity, combine) of reduction ``op`` in ``ctype``: integers have no infinities."""
    identity, combine = REDUCTIONS[op]
    if ctype == "bool":  # any and all (capture.py): a max and a min of truth values
        return {"amax": ("false", "({a} || {v})"), "amin": ("true", "({a} && {v})")}[op]
    if ctype in ("int64_t", "int32_t"):
        bits = ctype[3:5]
        identity = {"INFINITY": f"INT{bits}_MAX", "-INFINITY": f"INT{bits}_MIN"}.get(identity, identity)
    return identity, combine


# dtype -> the C type its values are computed in.
DTYPES = {
    "float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t", "bool": "bool",
    "bfloat16": "float", "float16": "float",
}  # fmt: skip
# 16-bit floats are stored as such and computed in float, as ATen's kernels and inductor's do: (the C type in memory,
# its load conversion, its store conversion). The preludes define these names for both devices; the conversions are
# functions, not the CUDA types' operators, which torch's build flags (workdir form) switch off.
HALF_TYPES = {
    "bfloat16": ("nv_bfloat16", "bf16_to_float", "float_to_bf16"),
    "float16": ("half", "half_to_float", "float_to_half"),
}


def loaded(node: Node, element: str) -> str:
    """The value of ``element``, an element of ``node``'s buffer, in its compute type."""
    half = HALF_TYPES.get(node.dtype)
    return f"{half[1]}({element})" if half else element


def stored(node: Node, target: str, value: str) -> str:
    """The statement storing ``value`` (compute type) into ``target``, an element of ``node``'s buffer."""
    half = HALF_TYPES.get(node.dtype)
    return f"{target} = {half[2]}({value});" if half else f"{target} = {value};"


@dataclass(eq=False)
class Node:
    name: str
    op: str
    kind: OpKind
    shape: tuple[int, ...]
    dtype: str  # a key of DTYPES
    args: tuple[Any, ...] = ()  # Nodes and Python scalars
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def ctype(self) -> str:
        return DTYPES[self.dtype]

    @property
    def storage(self) -> str:
        """The C type of the node's elements in memory (``ctype`` is the one they are computed in)."""
        half = HALF_TYPES.get(self.dtype)
        return half[0] if half else self.ctype

    def inputs(self) -> list[Node]:
        return [a for a in self.args if isinstance(a, Node)]

    def __repr__(self) -> str:
        return f"{self.name}={self.op}{list(self.shape)}:{self.dtype}"


@dataclass
class Graph:
    nodes: list[Node]
    inputs: list[Node]  # forward's tensor arguments, in order (non-tensor arguments are baked in as constants)
    params: list[Node]  # module parameters and buffers; attrs["qualname"] is the name on the module
    outputs: list[Node]
    single_output: bool  # forward returns one tensor rather than a tuple/list
    input_positions: list[int]  # position of each tensor input among forward's arguments
    arg_count: int  # forward's argument count

    def users(self) -> dict[Node, list[Node]]:
        out: dict[Node, list[Node]] = {n: [] for n in self.nodes}
        for n in self.nodes:
            for a in n.inputs():
                out[a].append(n)
        return out

    def ops(self) -> list[str]:
        return sorted({f"{n.kind.value}:{n.op}" for n in self.nodes if n.kind not in (OpKind.INPUT, OpKind.PARAM)})
