"""Plan: fusion groups (kernels) over the captured graph, lowered to device-neutral C statements.

Every kernel is a *row kernel*: an iteration shape S split into outer dimensions (one row each) and reduced
dimensions D (possibly none: a plain elementwise kernel). Per row it computes its reductions in dependency order —
each one a loop over D whose body is the inlined producer chain — and then writes its outputs: full-shape ones in a
last loop over D, reduced ones once per row. Softmax, log-softmax, logsumexp, layer/RMS/group norms and
"reduce then broadcast back" chains are all one kernel this way. Pointwise and view nodes are inlined (recomputed
where read); a reduction whose row structure differs from the kernel reading it gets its own kernel and a buffer.
Contractions (mm/bmm) are kernels of their own reading their operands through strides, so transposed weights cost
no copy. Convolutions (any dimensionality, grouped, transposed) are kernels of their own too, reading a contiguous
input; their bias is a broadcast add that fuses into the epilogue kernel after them. Where our own kernel runs a
product or a convolution (not a vendor library's), that elementwise kernel becomes its epilogue (``fuse_epilogues``):
the product's output goes from registers through the epilogue's statements to the final buffers, a pass over the
output (read and written again) fewer.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from cuda_agent.author.ir import (
    BINARY,
    FAST_FLOAT,
    HALF_TYPES,
    REDUCTIONS,
    UNARY,
    Graph,
    Node,
    OpKind,
    Unsupported,
    loaded,
    reduction,
)

Coords = tuple[str, ...]


def contiguous_strides(shape: tuple[int, ...]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= size
    return strides[::-1]


class Digit(str):
    """A coordinate that is one digit of a flat index split over several dims by ``reshape_coords``:
    ``flat / div % size``, the leading digit without the modulo. ``linear_index`` puts a run of a flat index's
    digits back together ((F / (d * n)) * n + (F / d) % n == F / d), so a reshape and its inverse (a GroupNorm's
    groups, split from the channels and merged back) index the tensor by the flat index itself, not by a division
    and a remainder per dim."""

    flat: str
    div: int
    size: int
    leading: bool

    @staticmethod
    def of(text: str, flat: str, div: int, size: int, leading: bool) -> Digit:
        digit = Digit(text)
        digit.flat, digit.div, digit.size, digit.leading = flat, div, size, leading
        return digit


class Flat(str):
    """A flat index over several dims (``linear_index``) that remembers their sizes and coordinates: split over the
    same sizes again (``reshape_coords``: a reshape, then its inverse), it gives those coordinates back, so that a
    kernel iterating a reduction's rows (a GroupNorm's groups) recognizes its own coordinates in the reshaped
    output's expression."""

    parts: tuple[tuple[int, str], ...]

    @staticmethod
    def of(text: str, parts: tuple[tuple[int, str], ...]) -> Flat:
        flat = Flat(text)
        flat.parts = parts
        return flat


def linear_index(shape: tuple[int, ...], coords: Coords) -> str:
    """C expression of the contiguous offset of ``coords`` in ``shape``; size-1 dims and zero coords drop out, and
    runs of one flat index's digits (``Digit``) fold back into it."""
    dims = [
        (c, size, stride) for c, size, stride in zip(coords, shape, contiguous_strides(shape), strict=True) if size != 1
    ]
    terms, k = [], 0
    while k < len(dims):
        c, _, stride = dims[k]
        if not (isinstance(c, Digit) and c.leading):
            if c != "0":
                terms.append(c if stride == 1 else f"{c} * {stride}LL")
            k += 1
            continue
        # The digits that follow, each the next lower one of the same flat index over a dim of its size.
        end = k + 1
        while end < len(dims) and _next_digit(dims[end - 1][0], *dims[end][:2]):
            end += 1
        last, _, last_stride = dims[end - 1]
        assert isinstance(last, Digit)
        value = last.flat if last.div == 1 else f"(({last.flat}) / {last.div}LL)"
        if last_stride != 1:
            value = f"{value if value.isidentifier() else f'({value})'} * {last_stride}LL"
        terms.append(value)
        k = end
    if len(terms) == 1:
        return terms[0]
    text = " + ".join(terms) or "0"
    plain = len(dims) > 1 and not any(isinstance(c, Digit) for c, _, _ in dims)
    return Flat.of(text, tuple((n, c) for c, n, _ in dims)) if plain else text


def _next_digit(high: str, low: str, low_size: int) -> bool:
    return (
        isinstance(high, Digit)
        and isinstance(low, Digit)
        and not low.leading
        and low.flat == high.flat
        and low.size == low_size
        and high.div == low.div * low.size
    )


def c_literal(value: bool | int | float, ctype: str) -> str:
    if isinstance(value, bool) or ctype == "bool":
        return "true" if value else "false"
    if ctype in ("int64_t", "int32_t"):
        return f"(({ctype}){int(value)})"
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    text = repr(float(value))
    return f"{text}f" if ctype == "float" else text


def reshape_coords(src: tuple[int, ...], dst: tuple[int, ...], coords: Coords) -> Coords:
    """Coordinates in ``src`` of the element at ``coords`` of its contiguous reshape ``dst``: dims are matched
    group by group (products equal), so dims a reshape leaves alone keep their coordinate expression as is."""
    s_idx = [i for i, n in enumerate(src) if n != 1]
    d_idx = [i for i, n in enumerate(dst) if n != 1]
    out = ["0"] * len(src)
    si = di = 0
    while si < len(s_idx) or di < len(d_idx):
        sg, dg = [s_idx[si]], [d_idx[di]]
        sp, dp = src[s_idx[si]], dst[d_idx[di]]
        si, di = si + 1, di + 1
        while sp != dp:
            if sp < dp:
                sg.append(s_idx[si])
                sp *= src[s_idx[si]]
                si += 1
            else:
                dg.append(d_idx[di])
                dp *= dst[d_idx[di]]
                di += 1
        if len(sg) == 1 and len(dg) == 1:
            out[sg[0]] = coords[dg[0]]
            continue
        flat = linear_index(tuple(dst[i] for i in dg), tuple(coords[i] for i in dg))
        parts = getattr(flat, "parts", ())
        if [n for n, _ in parts] == [src[i] for i in sg]:  # the dims ``flat`` was made of
            for i, (_, c) in zip(sg, parts, strict=True):
                out[i] = c
            continue
        stride = sp
        for k, i in enumerate(sg):
            stride //= src[i]
            q = (flat if flat.isidentifier() else f"({flat})") if stride == 1 else f"(({flat}) / {stride}LL)"
            out[i] = Digit.of(q if k == 0 else f"({q} % {src[i]}LL)", flat, stride, src[i], k == 0)
    return tuple(out)


def broadcast_coords(src: tuple[int, ...], dst: tuple[int, ...], coords: Coords) -> Coords:
    lead = len(dst) - len(src)
    return tuple("0" if n == 1 else coords[lead + k] for k, n in enumerate(src))


def view_coords(node: Node, coords: Coords) -> Coords:
    """Coordinates in the view's source of the element at ``coords`` of the view."""
    src = node.args[0]
    a = node.attrs
    if node.op == "reshape":
        return reshape_coords(src.shape, node.shape, coords)
    if node.op == "broadcast":
        return broadcast_coords(src.shape, node.shape, coords)
    if node.op == "broadcast_in_dim":
        return tuple("0" if n == 1 else coords[d] for n, d in zip(src.shape, a["dims"], strict=True))
    if node.op == "permute":
        out = ["0"] * len(src.shape)
        for k, p in enumerate(a["perm"]):
            out[p] = coords[k]
        return tuple(out)
    if node.op == "slice":
        out = list(coords)
        d, start, step = a["dim"], a["start"], a["step"]
        c = coords[d] if step == 1 else f"({coords[d]} * {step}LL)"
        out[d] = c if start == 0 else f"({start}LL + {c})"
        return tuple(out)
    if node.op == "flip":
        return tuple(f"({src.shape[j] - 1}LL - {c})" if j in a["dims"] else c for j, c in enumerate(coords))
    if node.op == "select":
        return (*coords[: a["dim"]], str(a["index"]), *coords[a["dim"] :])
    raise Unsupported(f"view {node.op}")


@dataclass
class Scope:
    """The statements of one loop body; values are computed once per scope and coordinate tuple."""

    stmts: list[str] = field(default_factory=list)
    memo: dict[tuple[int, Coords], str] = field(default_factory=dict)
    identity_loads: dict[str, Node] = field(default_factory=dict)  # buffer -> node read at the kernel's own index
    windows: dict[str, Window] = field(default_factory=dict)  # a fixed pooling window's value -> its loop nest


@dataclass
class Window:
    """A fixed (not adaptive) pooling window computed by ``Scope.stmts[begin:end]``: what emit.py needs to compute
    it for 4 neighbouring outputs at once instead (their taps along the last dim loaded as shared 16-byte quads)."""

    begin: int
    end: int
    buffer: str
    src: Node  # the input, of the window's rank, its spatial dims last
    coords: Coords  # the output element's
    kernel: tuple[int, ...]  # kernel, stride, pad and dilation per spatial dim
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    dilation: tuple[int, ...]
    ctype: str
    identity: str
    combine: str  # of the running value {a} and a tap's {v}
    counted: bool  # the taps inside the input counted in n_<value> (avg_pool's count_include_pad=False)


def window_tap(
    var: str, j: int, coord: str, n: int, k: int, stride: int, pad: int, dilation: int
) -> tuple[list[str], str]:
    """The loop over the taps of window ``var`` along its spatial dim ``j`` (of ``k`` taps, at output coordinate
    ``coord`` of an input of ``n``) opened, and its tap's test of lying within the input."""
    a, h = f"a{j}_{var}", f"h{j}_{var}"
    start = f"({coord} * {stride}LL - {pad}LL)"
    loop = [f"for (int64_t {a} = 0; {a} < {k}; ++{a}) {{", f"const int64_t {h} = {start} + {a} * {dilation}LL;"]
    return loop, f"{h} >= 0 && {h} < {n}LL"


@dataclass
class FusedReduction:
    node: Node
    var: str
    scope: Scope
    value: str
    # The body does not vary along the reduced dims (a reduction of a broadcast): emit.py computes it once and
    # folds it (n * v for sum, v**n for prod, v for max/min) instead of looping.
    invariant: bool = False


@dataclass
class RowKernel:
    name: str
    shape: tuple[int, ...]
    dims: tuple[int, ...] | None  # None until a reduction fixes them; () = elementwise
    reductions: list[FusedReduction] = field(default_factory=list)
    out_scope: Scope = field(default_factory=Scope)
    row_scope: Scope = field(default_factory=Scope)  # per row, after the reductions (reduced outputs)
    full_outputs: list[tuple[str, str]] = field(default_factory=list)  # (buffer, value) at the kernel's index
    reduced_outputs: list[tuple[str, str, str]] = field(default_factory=list)  # (buffer, value, offset per row)
    reads: dict[str, Node] = field(default_factory=dict)  # buffers read (name -> node giving dtype)
    writes: dict[str, Node] = field(default_factory=dict)
    scan: Node | None = None  # a scan kernel: full outputs are the running reduction along ``dims``
    # Where a scan's output goes when the buffer holds it permuted (flipped, transposed, reshaped): the flat offset
    # of the kernel's element i0.. in the buffer; None: at the kernel's own index.
    store_at: str | None = None
    values: int = 0  # statements named so far
    # Blocks a row is split into (emit.split_rows: rows too few to fill the GPU a block each): each pass over the
    # row is a launch of its own, its blocks' partial results kept in ``partials`` (reduction var -> buffer of
    # outer x split values) and combined by the blocks of the later launches.
    split: int = 1
    partials: dict[str, str] = field(default_factory=dict)
    # A split row run as one cooperative launch (emit.Variant.cache "segment"): the buffer of a counter a row, of
    # its blocks' partial results stored so far, which the row's blocks wait on instead of a launch's end.
    arrivals: str | None = None

    @property
    def reduced(self) -> tuple[int, ...]:
        return self.dims or ()

    @property
    def outer(self) -> int:
        return math.prod(n for i, n in enumerate(self.shape) if i not in self.reduced)

    @property
    def inner(self) -> int:
        return math.prod(self.shape[i] for i in self.reduced)

    @property
    def along_last(self) -> bool:
        """The rows run along the last dim: contiguous in memory."""
        return len(self.shape) - 1 in self.reduced


@dataclass
class Operand:
    buffer: str
    node: Node
    strides: list[int]  # element strides of the operand's (batch,) rows, cols as the contraction reads them
    scale: float = 1.0  # a factor the product applies to its sums instead of the operand to its elements


@dataclass
class GemmKernel:
    name: str
    node: Node
    a: Operand
    b: Operand
    out: str
    batch: int
    m: int
    n: int
    k: int
    alpha: float = 1.0  # the product's sums are scaled by this (the operands' factors, ``Operand.scale``)
    reads: dict[str, Node] = field(default_factory=dict)
    writes: dict[str, Node] = field(default_factory=dict)
    epilogue: RowKernel | None = None  # ``fuse_epilogues``: computed from each output element instead of storing it


@dataclass
class ConvKernel:
    """A convolution (attrs of its node: stride, pad, dilation per spatial dim, transposed, groups) of a
    contiguous input by the weight as the module holds it: [out, in / groups, *k], transposed [in, out / groups, *k]."""

    name: str
    node: Node
    x: str
    w: str
    out: str
    reads: dict[str, Node] = field(default_factory=dict)
    writes: dict[str, Node] = field(default_factory=dict)
    epilogue: RowKernel | None = None  # ``fuse_epilogues``: computed from each output element instead of storing it

    @property
    def x_shape(self) -> tuple[int, ...]:
        return self.reads[self.x].shape

    @property
    def w_shape(self) -> tuple[int, ...]:
        return self.reads[self.w].shape

    def describe(self) -> str:
        a = self.node.attrs
        kind = f"{'transposed ' if a['transposed'] else ''}conv{len(self.node.shape) - 2}d"
        return (
            f"{self.name}: {kind} {list(self.x_shape)} by {list(self.w_shape)} -> {self.out} {list(self.node.shape)}, "
            f"stride {list(a['stride'])} pad {list(a['pad'])} dilation {list(a['dilation'])} groups {a['groups']}"
        )


@dataclass
class RecurrenceKernel:
    """A recurrent layer's steps in each of its directions (``capture.recurrence``): each step's gates from the
    projected input (``gates``) and the last hidden state (``h0`` first) by ``w_hh`` and ``b_hh``, through the cell,
    into ``out`` (each step's hidden states at the step, directions side by side, and an LSTM's cell states after
    them, from ``c0``). Buffers are contiguous; ``c0`` and ``b_hh`` are None where the node has none."""

    name: str
    node: Node
    gates: str
    h0: str
    c0: str | None
    w_hh: str
    b_hh: str | None
    out: str
    reads: dict[str, Node] = field(default_factory=dict)
    writes: dict[str, Node] = field(default_factory=dict)

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        """(steps, directions, batch, hidden)."""
        directions, batch, hidden = self.reads[self.h0].shape
        return self.reads[self.gates].shape[0], directions, batch, hidden

    def describe(self) -> str:
        steps, directions, batch, hidden = self.sizes
        ways = " both ways" if directions == 2 else ""
        mode = self.node.attrs["mode"]
        return f"{self.name}: {mode} over {steps} steps{ways}, batch {batch}, hidden {hidden} -> {self.out}"


Kernel = RowKernel | GemmKernel | ConvKernel | RecurrenceKernel


@dataclass
class Plan:
    graph: Graph
    kernels: list[Kernel]
    buffers: dict[str, Node]  # every tensor the kernels touch: in*, p*, b* (scratch), out*
    outputs: list[str]  # the buffer of each graph output, in order
    fast_math: bool = False  # its float math as ir.FAST_FLOAT

    def bind(self, model: Any, inputs: list[Any], device: str = "cpu") -> dict[str, Any]:
        """Every buffer as a tensor for calling the launchers directly (tests, kernel benchmarks): the forward's
        tensor inputs and the module's parameters and buffers contiguous, the rest allocated on ``device``."""
        import torch

        from cuda_agent.author.capture import tensor_attributes

        state = {**dict(model.named_parameters()), **dict(model.named_buffers()), **tensor_attributes(model)}
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        bound = {n.name: t.contiguous() for n, t in zip(self.graph.inputs, tensors, strict=True)}
        bound |= {p.name: state[p.attrs["qualname"]].detach().contiguous() for p in self.graph.params}
        for name, node in self.buffers.items():
            bound.setdefault(name, torch.empty(node.shape, dtype=getattr(torch, node.dtype), device=device))
        return bound

    def describe(self) -> str:
        lines = []
        for k in self.kernels:
            if isinstance(k, RowKernel):
                reds = ", ".join(r.node.op for r in k.reductions) or "none"
                lines.append(
                    f"{k.name}: rows {k.outer} x {k.inner} over dims {list(k.reduced)} of {list(k.shape)}; "
                    f"reductions {reds}; writes {', '.join(k.writes)}"
                )
                continue
            if isinstance(k, ConvKernel | RecurrenceKernel):
                lines.append(k.describe())
            else:
                lines.append(f"{k.name}: {k.node.op} [{k.batch}x]{k.m}x{k.n}x{k.k} -> {k.out}")
            if not isinstance(k, RecurrenceKernel) and k.epilogue is not None:
                lines[-1] += f"; epilogue {k.epilogue.name} writes {', '.join(k.epilogue.writes)}"
        return "\n".join(lines)


# Producers one kernel's expression may nest, and distinct ones it may inline (see Planner._bound_fusion).
FUSION_DEPTH = 64
FUSION_NODES = 64
# Pieces of a concatenation a kernel may inline where more than one node reads it (see Planner._bound_fusion).
CAT_PIECES = 8


class Planner:
    def __init__(self, graph: Graph, fast_math: bool = False) -> None:
        self.graph = graph
        self.fast_math = fast_math  # float exp, sigmoid, silu and quotients as ir.FAST_FLOAT
        self.kernels: list[Kernel] = []
        self.buffers: dict[str, Node] = {}
        self.materialized: dict[int, str] = {}
        for n in graph.inputs + graph.params:
            self.materialized[id(n)] = n.name
            self.buffers[n.name] = n
        self._tmp = 0
        self._user_map: dict[Node, list[Node]] | None = None
        self._pending: set[int] = set()  # reductions whose kernels are being planned (``_dependent_reduction``)

    def plan(self) -> Plan:
        self._bound_fusion()
        outputs: list[str] = []
        for i, node in enumerate(self.graph.outputs):
            name = f"out{i}"
            if id(node) in self.materialized:  # an input, parameter or another output returned as is: copy it
                node = Node(f"copy{i}", "alias", OpKind.POINTWISE, node.shape, node.dtype, (node,))
            base = self._reshaped_product(node)
            if base is not None:
                # The product's kernel writes the output: a reshape keeps every element where it is.
                self.materialize(base, name)
                self.buffers[name] = node  # allocated in the output's shape
                self.materialized[id(node)] = name
            else:
                self.materialize(node, name)
            outputs.append(name)
        return Plan(self.graph, self.kernels, self.buffers, outputs, self.fast_math)

    def _bound_fusion(self) -> None:
        """Materialize, in graph order, every node whose expression would otherwise inline producers
        ``FUSION_DEPTH`` deep, or ``FUSION_NODES`` distinct ones where more than one node reads it: values are built
        by recursion over producers, and a long chain (a loop in forward) would nest past Python's recursion limit;
        and a value several kernels may inline is computed again in each, so a recurrence's state (an LSTM's cell,
        each step's from the last one's and that step's gates, read by the step's output and the next step) would
        be recomputed over and over in every step's kernel. The shared expressions of ordinary problems are far
        smaller (tens of nodes). A node of a materialized kind is one load to its readers."""
        depth: dict[int, int] = {id(n): 0 for n in self.graph.inputs + self.graph.params}
        read: dict[int, frozenset[int]] = {id(n): frozenset() for n in self.graph.inputs + self.graph.params}
        users = self._users()
        for node in self.graph.nodes:
            if id(node) in depth:
                continue
            depth[id(node)] = 1 + max((depth[id(a)] for a in node.inputs()), default=0)
            inlined = frozenset({id(node)}).union(*(read[id(a)] for a in node.inputs()))
            # Every piece of an inlined concatenation is read for each of its elements (``_index``), in each of its
            # readers: one of many pieces (a dense block's features, each layer's input the concatenation of all the
            # earlier ones, read by its norm's statistics and by its normalization) is read once, by a kernel of
            # its own, and its text, as long as its pieces, is not copied into every reader.
            wide = node.op == "cat" and len(node.args) > CAT_PIECES
            shared = (len(inlined) >= FUSION_NODES or wide) and len(users.get(node, ())) > 1
            if depth[id(node)] >= FUSION_DEPTH or shared:
                self.materialize(node)
                depth[id(node)] = 0
            read[id(node)] = frozenset({id(node)}) if node.kind in _MATERIALIZED or depth[id(node)] == 0 else inlined

    def materialize(self, node: Node, name: str | None = None, also: Node | None = None) -> str:
        """The buffer holding ``node``, planning the kernel that writes it when there is none yet; ``also``: a
        reduction that kernel fuses as an earlier pass, which it writes too."""
        if id(node) in self.materialized:
            return self.materialized[id(node)]
        later = self._dependent_reduction(node) if node.kind is OpKind.REDUCTION and name is None else None
        if later is not None:
            # A kernel for the later reduction reads the rows for both; read apart, a kernel each would.
            self._pending.add(id(later))
            self.materialize(later, also=node)
            self._pending.discard(id(later))
            if id(node) in self.materialized:
                return self.materialized[id(node)]
        name = name or self._scratch()
        # The kernel's name and the buffer are recorded only once its producers are planned (they come first).
        if node.kind is OpKind.CONVOLUTION:
            return self._add(self._conv(node, name), node, name)
        if node.kind is OpKind.RECURRENCE:
            return self._add(self._recurrence(node, name), node, name)
        if node.kind is OpKind.CONTRACTION and self._diagonal_side(node) is None:
            gemm = self._gemm(node, name)
            return self._add(gemm, node, name)
        for red in self._inlined_reductions(node):
            if red is not node and self._needs_staging(red):
                self.materialize(red.args[0])  # before this kernel inlines the staged producer chain itself
        row = node if node.kind is OpKind.REDUCTION else self._row_reduction(node)
        self._materialize_siblings(node, row)
        scan, store_at = self._permuted_scan(node)
        if scan is not None:
            # The scan's input is inlined into the loop along the scanned dim (a thread or a block per row).
            kernel = RowKernel("", scan.shape, (scan.attrs["dim"],), scan=scan, store_at=store_at)
            coords = tuple(f"i{j}" for j in range(len(scan.shape)))
            value = self.value(kernel, kernel.out_scope, scan.args[0], coords)
            kernel.full_outputs.append((name, value))
        elif row is not None:
            # A per-row result (a reduction, or arithmetic on reductions such as logsumexp): iterate the reduced
            # tensor's rows and write one value per row.
            if node is row and self._needs_staging(row):
                self.materialize(row.args[0])
            kernel = RowKernel("", row.args[0].shape, tuple(row.attrs["dims"]))
            coords = reshape_coords(node.shape, row.shape, self._expected(kernel, row))
            value = self.value(kernel, kernel.row_scope, node, coords)
            kernel.reduced_outputs.append((name, value, linear_index(node.shape, coords)))
            fused = next((r for r in kernel.reductions if r.node is also), None)
            if also is not None and fused is not None:
                also_name = self._scratch()
                at = linear_index(also.shape, self._expected(kernel, also))
                kernel.reduced_outputs.append((also_name, fused.var, at))
                kernel.writes[also_name] = also
                self.materialized[id(also)] = also_name
                self.buffers[also_name] = also
        else:
            shape = self._rows_shape(node)
            kernel = RowKernel("", shape, None)
            own = tuple(f"i{j}" for j in range(len(shape)))
            coords = own if shape == node.shape else reshape_coords(node.shape, shape, own)
            value = self.value(kernel, kernel.out_scope, node, coords)
            kernel.full_outputs.append((name, value))
        kernel.writes[name] = node
        return self._add(kernel, node, name)

    def _rows_shape(self, node: Node) -> tuple[int, ...]:
        """The shape an elementwise kernel computing ``node`` iterates: ``node``'s, or, where ``node`` reads a
        reduction over a reshape of it (a GroupNorm's output, its groups' rows merged back into channels), the
        reduction's input's, so that the kernel's rows are the reduction's and it fuses it (its elements are
        ``node``'s in the same order)."""
        for red in self._inlined_reductions(node):
            rows = red.args[0].shape
            if rows != node.shape and math.prod(rows) == node.numel and red.attrs["dims"]:
                return rows
        return node.shape

    def _dependent_reduction(self, red: Node) -> Node | None:
        """The last reduction over the same rows as ``red`` that reads it through pointwise and view nodes (a
        softmax's sum of exp(x - max) for its max, a variance for its mean), not planned yet and needing no staging
        (``_needs_staging``): its kernel fuses ``red`` as an earlier pass."""
        rows = (red.args[0].shape, tuple(red.attrs["dims"]))
        order = {id(n): k for k, n in enumerate(self.graph.nodes)}
        users = self._users()
        found: Node | None = None
        stack, seen = [red], {id(red)}
        while stack:
            for user in users.get(stack.pop(), []):
                # (one being planned now, whose kernel asks for ``red`` apart, is planned as it is)
                if id(user) in seen or id(user) in self.materialized or id(user) in self._pending:
                    continue
                seen.add(id(user))
                if user.kind in (OpKind.POINTWISE, OpKind.VIEW):
                    stack.append(user)
                elif user.kind is OpKind.REDUCTION and (user.args[0].shape, tuple(user.attrs["dims"])) == rows:
                    stack.append(user)  # (a later pass may read it in turn)
                    if not self._needs_staging(user) and (found is None or order[id(user)] > order[id(found)]):
                        found = user
        return found if red.attrs["dims"] else None

    def _permuted_scan(self, node: Node) -> tuple[Node | None, str | None]:
        """The scan ``node`` is, or the scan it permutes (flips, transposes and reshapes that nothing else reads,
        as in a suffix sum ``x.flip(d).cumsum(d).flip(d)``) with the offset its kernel stores each element at:
        the scan writes the permuted buffer itself instead of a buffer another kernel copies. (None, None)
        otherwise."""
        views = []
        while node.kind is OpKind.VIEW and node.op in _BIJECTIVE and id(node.args[0]) not in self.materialized:
            views.append(node)
            node = node.args[0]
        if node.kind is not OpKind.SCAN or id(node) in self.materialized:
            return None, None
        if not views:
            return node, None
        users = self._users()
        if any(len(users[v.args[0]]) != 1 for v in views):
            return None, None
        coords: Coords = tuple(f"i{j}" for j in range(len(node.shape)))
        for view in reversed(views):
            coords = _forward_coords(view, coords)
        return node, linear_index(views[0].shape, coords)

    def _reshaped_product(self, node: Node) -> Node | None:
        """The product, convolution or reduction ``node`` reshapes (and nothing else reads on the way), or None: a
        kernel of its own writes it contiguously, in the order of the reshaped output too."""
        views = []
        while node.kind is OpKind.VIEW and node.op == "reshape" and id(node.args[0]) not in self.materialized:
            views.append(node)
            node = node.args[0]
        kinds = (OpKind.CONTRACTION, OpKind.CONVOLUTION, OpKind.REDUCTION)
        if not views or node.kind not in kinds or id(node) in self.materialized:
            return None
        if node.kind is OpKind.CONTRACTION and self._diagonal_side(node) is not None:
            return None  # a row scaling: the output's own elementwise kernel computes it
        users = self._users()
        return node if all(len(users[v.args[0]]) == 1 for v in views) else None

    def _users(self) -> dict[Node, list[Node]]:
        if self._user_map is None:
            self._user_map = self.graph.users()
            for out in self.graph.outputs:  # an output is read by the caller
                self._user_map.setdefault(out, []).append(out)
        return self._user_map

    def _materialize_siblings(self, node: Node, row: Node | None) -> None:
        """Reductions ``node`` reads over rows other than its kernel's, planned together: those over the same rows
        (a GroupNorm's mean and variance, read by the elementwise kernel that normalizes) become one kernel
        writing each of them, one pass over the rows per reduction instead of a kernel each that recomputes the
        ones it depends on."""
        own = (row.args[0].shape, tuple(row.attrs["dims"])) if row is not None else None
        groups: dict[tuple[tuple[int, ...], tuple[int, ...]], list[Node]] = {}
        for red in reversed(self._inlined_reductions(node)):  # producers first
            rows = (red.args[0].shape, tuple(red.attrs["dims"]))
            if red is not node and rows != own and red.attrs["dims"] and not self._needs_staging(red):
                groups.setdefault(rows, []).append(red)
        for (shape, dims), reds in groups.items():
            if self._rows_shape(node) == shape:  # reductions this kernel may fuse
                continue
            # The arithmetic on them that is the same for a whole row (a norm's mean and reciprocal standard
            # deviation from its sums) is done once a row here, not once an element by the kernel reading it.
            values = [v for v in self._row_values(node, reds) if v not in reds]
            if len(reds) < 2 and not values:  # one reduction alone: the kernel reading it plans it
                continue
            kernel = RowKernel("", shape, dims)
            outs = [*reds, *values]
            names = [self._scratch() for _ in outs]
            for out, name in zip(outs, names, strict=True):
                coords = reshape_coords(out.shape, reds[0].shape, self._expected(kernel, reds[0]))
                kernel.reduced_outputs.append(
                    (name, self.value(kernel, kernel.row_scope, out, coords), linear_index(out.shape, coords))
                )
                kernel.writes[name] = out
            self._add(kernel, outs[-1], names[-1])
            for out, name in zip(outs[:-1], names[:-1], strict=True):  # the last one _add recorded
                self.materialized[id(out)] = name
                self.buffers[name] = out

    def _row_values(self, node: Node, reds: list[Node]) -> list[Node]:
        """The values ``node`` reads that are computed from reductions ``reds`` (over the same rows) alone, one a
        row (pointwise arithmetic and reshapes of them): the last ones before its per-element work."""
        rows = reds[0].numel
        per_row: dict[int, bool] = {id(r): True for r in reds}

        def row_level(n: Node) -> bool:
            if id(n) not in per_row:
                per_row[id(n)] = (
                    n is not node
                    and id(n) not in self.materialized
                    and n.numel == rows
                    and (n.kind is OpKind.POINTWISE or n.op == "reshape")
                    and bool(n.inputs())
                    and all(row_level(a) for a in n.inputs())
                )
            return per_row[id(n)]

        return self._inlined(node, row_level)

    def _scratch(self) -> str:
        """A new intermediate buffer's name."""
        self._tmp += 1
        return f"b{self._tmp - 1}"

    def _add(self, kernel: Kernel, node: Node, name: str) -> str:
        kernel.name = f"k{len(self.kernels)}_{node.op}"
        self.kernels.append(kernel)
        self.materialized[id(node)] = name
        self.buffers[name] = node
        return name

    # --- values -----------------------------------------------------------------------------------------------
    def value(self, kernel: RowKernel, scope: Scope, node: Node, coords: Coords) -> str:
        key = (id(node), coords)
        if key in scope.memo:
            return scope.memo[key]
        expr = self._value(kernel, scope, node, coords)
        if node.kind in (OpKind.POINTWISE, OpKind.INPUT, OpKind.PARAM, OpKind.CONTRACTION, OpKind.CONVOLUTION) or (
            node.kind is OpKind.REDUCTION and not expr.startswith("red")
        ):
            kernel.values += 1  # names unique in the kernel: emit.py may hoist statements of several scopes together
            var = f"t{kernel.values}"
            scope.stmts.append(f"const {node.ctype} {var} = {expr};")
            expr = var
        scope.memo[key] = expr
        return expr

    def _value(self, kernel: RowKernel, scope: Scope, node: Node, coords: Coords) -> str:
        if node.kind is OpKind.CONST:
            return c_literal(node.attrs["value"], node.ctype)
        if node.kind is OpKind.VIEW and id(node) in self.materialized:  # staged: written in the view's own layout
            return self._load(kernel, scope, node, self.materialized[id(node)], coords)
        if node.kind is OpKind.VIEW:
            source = self._reshaped_buffer(node)
            if source is not None and node.shape == kernel.shape and coords == _own(kernel):
                # The kernel's element i is the buffer's element i: read at the kernel's own index (emit.py may
                # load these 16 bytes at a time), not through the coordinates of another shape.
                buffer = self.materialized[id(source)]
                kernel.reads[buffer] = source
                scope.identity_loads[buffer] = source
                return f"ld_{buffer}"
            return self.value(kernel, scope, node.args[0], view_coords(node, coords))
        # A reduction another kernel wrote is one load per row; fused again, it would be another pass over the row.
        if node.kind is OpKind.REDUCTION and id(node) not in self.materialized and self._fusable(kernel, node, coords):
            if kernel.dims is None:
                kernel.dims = tuple(node.attrs["dims"])
            return self._fuse_reduction(kernel, node)
        if node.kind is OpKind.CONTRACTION and id(node) not in self.materialized:
            side = self._diagonal_side(node)
            if side is not None:
                return self._diagonal_product(kernel, scope, node, side, coords)
        if id(node) in self.materialized or node.kind in _MATERIALIZED:
            return self._load(kernel, scope, node, self.materialize(node), coords)
        if node.kind is OpKind.POINTWISE:
            return self._pointwise(kernel, scope, node, coords)
        if node.kind is OpKind.INDEX:
            return self._index(kernel, scope, node, coords)
        if node.kind is OpKind.WINDOW:
            return self._window(kernel, scope, node, coords)
        raise Unsupported(node.op)

    def _index(self, kernel: RowKernel, scope: Scope, node: Node, coords: Coords) -> str:
        """Reads whose coordinates come from data (an index tensor) or from a piece of the output (cat)."""
        op, a = node.op, node.attrs
        if op == "iota":
            return f"(({node.ctype})({a['start']} + {a['step']} * {coords[0]}))"
        if op == "cat":
            # An element reads its own piece alone, under the branch that selects it: read for every element, each
            # piece cost a load (and its arithmetic) for nothing. Values a branch computes stay in it (a scope of
            # its own, knowing the values computed before); its reads stay clamped into the piece, in bounds
            # wherever emit.py places them.
            dim, offset, last = a["dim"], 0, len(node.args) - 1
            kernel.values += 1
            var = f"t{kernel.values}"
            scope.stmts.append(f"{node.ctype} {var};")
            for piece, src in enumerate(node.args):
                size = src.shape[dim]
                local = f"({coords[dim]} - {offset}LL)" if offset else coords[dim]
                clamped = (
                    local
                    if size == node.shape[dim]
                    else f"({local} < 0 ? 0 : ({local} > {size - 1} ? {size - 1} : {local}))"
                )
                branch = Scope(memo=dict(scope.memo), identity_loads=scope.identity_loads)
                value = self.value(kernel, branch, src, (*coords[:dim], clamped, *coords[dim + 1 :]))
                offset += size
                opening = f"if ({coords[dim]} < {offset}LL) {{" if piece < last else "{"
                scope.stmts += [opening if piece == 0 else f"}} else {opening}", *branch.stmts, f"{var} = {value};"]
            scope.stmts.append("}")
            return var
        if op == "pad":
            # Reads are clamped into the source (always in bounds, as cat's are) and the fill selected outside it.
            src, inside, at = node.args[0], [], []
            for c, b, n, m in zip(coords, a["before"], src.shape, node.shape, strict=True):
                if b == 0 and n == m:
                    at.append(c)
                    continue
                local = f"({c} - ({b}LL))" if b else c  # b < 0 crops
                at.append(f"({local} < 0 ? 0 : ({local} > {n - 1}LL ? {n - 1}LL : {local}))")
                inside.append(f"({local} >= 0 && {local} < {n}LL)")
            value = self.value(kernel, scope, src, tuple(at))
            return f"(({' && '.join(inside) or 'true'}) ? {value} : {c_literal(a['value'], node.ctype)})"
        if op == "slice_scatter":
            # src where the strided slice covers the element, dst elsewhere; src is read at a clamped coordinate.
            dst, src = node.args
            d, start, step, n = a["dim"], a["start"], a["step"], src.shape[a["dim"]]
            local = f"({coords[d]} - {start}LL)"
            j = local if step == 1 else f"({local} / {step}LL)"
            covers = f"{local} >= 0 && {local} <= {(n - 1) * step}LL" + (
                f" && {local} % {step}LL == 0" if step > 1 else ""
            )
            clamped = f"({j} < 0 ? 0 : ({j} > {n - 1}LL ? {n - 1}LL : {j}))"
            covered = self.value(kernel, scope, src, (*coords[:d], clamped, *coords[d + 1 :]))
            return f"(({covers}) ? {covered} : {self.value(kernel, scope, dst, coords)})"
        if op == "index":
            src, indices, first = node.args[0], node.args[1:], a["first"]
            span = len(node.shape) - (len(src.shape) - len(indices))  # the index tensors' broadcast rank
            held = node.shape[first : first + span]
            at = []
            for d, idx in enumerate(indices):
                i = self.value(kernel, scope, idx, broadcast_coords(idx.shape, held, coords[first : first + span]))
                n = src.shape[first + d]
                at.append(f"((int64_t){i} < 0 ? (int64_t){i} + {n}LL : (int64_t){i})")
            return self.value(kernel, scope, src, (*coords[:first], *at, *coords[first + span :]))
        src, idx = node.args
        if op == "embedding":
            row = self.value(kernel, scope, idx, coords[:-1])
            return self.value(kernel, scope, src, (f"(int64_t){row}", coords[-1]))
        dim = a["dim"]
        i = self.value(kernel, scope, idx, (coords[dim],) if op == "index_select" else coords)
        return self.value(kernel, scope, src, (*coords[:dim], f"(int64_t){i}", *coords[dim + 1 :]))

    def _window(self, kernel: RowKernel, scope: Scope, node: Node, coords: Coords) -> str:
        """Pooling: a small loop nest over the window of a materialized source, over its last 2 or 3 dims. Taps
        outside the input (padding, ceil mode) are skipped; adaptive windows span [floor(i*n/m), ceil((i+1)*n/m))."""
        src = node.args[0]
        buffer = self._contiguous(src)  # a 1-d pool is a 2-d one of the unsqueezed input
        kernel.reads[buffer] = src
        a, t = node.attrs, node.ctype
        first = len(src.shape) - a["spatial"]
        identity, combine = reduction(a["reduce"], node.ctype)
        kernel.values += 1
        var = f"w{kernel.values}"
        taps = [f"h{j}_{var}" for j in range(a["spatial"])]
        # avg_pool with count_include_pad=False divides by the taps inside the input, counted as they are read.
        counted = a["reduce"] == "sum" and not (a["adaptive"] or a["count_pad"] or a["divisor"])
        lines = [f"{t} {var} = ({t})({identity});", *([f"int64_t n_{var} = 0;"] if counted else [])]
        sizes = []  # per dim: the window's extent as avg_pool's count_include_pad divides by it
        inside = []  # per fixed window's dim: its tap's test of lying within the input
        for j, h in enumerate(taps):
            c, n, m = coords[first + j], src.shape[first + j], node.shape[first + j]
            if a["adaptive"]:
                lo, hi = f"({c} * {n}LL / {m}LL)", f"((({c} + 1) * {n}LL + {m - 1}LL) / {m}LL)"
                lines.append(f"for (int64_t {h} = {lo}; {h} < {hi}; ++{h}) {{")
                sizes.append(f"({hi} - {lo})")
                continue
            k, stride, pad, dilation = a["kernel"][j], a["stride"][j], a["pad"][j], a["dilation"][j]
            start = f"({c} * {stride}LL - {pad}LL)"
            loop, test = window_tap(var, j, c, n, k, stride, pad, dilation)
            lines += loop
            inside.append(test)
            # Windows end at the padded input's edge; only ceil mode makes one reach past it.
            if (m - 1) * stride - pad + k <= n + pad:
                sizes.append(str(k))
            else:
                sizes.append(f"(({start} + {k}LL < {n + pad}LL ? {start} + {k}LL : {n + pad}LL) - {start})")
        load = loaded(src, f"{buffer}[{linear_index(src.shape, (*coords[:first], *taps))}]")
        # The taps' tests join in the innermost loop, so that every tap's load is one predicated instruction of the
        # unrolled window, all in flight at once (a test per dim's loop branched around a row of them: nvcc 13 kept
        # a 3x3 window's loads 3 at a time in flight).
        update = [f"{var} = {combine.format(a=var, v=load)};", *([f"++n_{var};"] if counted else [])]
        lines += [f"if ({' && '.join(inside)}) {{", *update, "}"] if inside else update
        if not a["adaptive"]:
            begin = len(scope.stmts)
            scope.windows[var] = Window(
                begin, begin + len(lines) + len(taps), buffer, src, coords, tuple(a["kernel"]), tuple(a["stride"]),
                tuple(a["pad"]), tuple(a["dilation"]), t, identity, combine, counted,
            )  # fmt: skip
        scope.stmts += [*lines, *("}" * len(taps))]
        if a["reduce"] == "amax":
            return var
        divisor = f"n_{var}" if counted else str(a["divisor"]) if a["divisor"] else " * ".join(sizes)
        return f"({var} / ({t})({divisor}))"

    def _reshaped_buffer(self, view: Node) -> Node | None:
        """The materialized node a chain of reshapes ``view`` ends in (a buffer holding its elements in the same
        order: inputs and parameters are made contiguous, kernels write contiguously), or None."""
        node = view
        while node.kind is OpKind.VIEW and node.op == "reshape" and id(node) not in self.materialized:
            node = node.args[0]
        return node if node is not view and id(node) in self.materialized else None

    def _load(self, kernel: RowKernel, scope: Scope, node: Node, buffer: str, coords: Coords) -> str:
        kernel.reads[buffer] = node
        index = linear_index(node.shape, coords)
        own = linear_index(kernel.shape, _own(kernel))
        if node.shape == kernel.shape and index == own:
            # Read at the kernel's own element: emit.py may load these 16 bytes at a time.
            scope.identity_loads[buffer] = node
            return f"ld_{buffer}"
        return loaded(node, f"{buffer}[{index}]")

    def _pointwise(self, kernel: RowKernel, scope: Scope, node: Node, coords: Coords) -> str:
        vals = []
        for a in node.args:
            if isinstance(a, Node):
                v = self.value(kernel, scope, a, broadcast_coords(a.shape, node.shape, coords))
                vals.append(v if a.ctype == node.ctype or node.op in _MIXED else f"(({node.ctype}){v})")
            else:
                vals.append(c_literal(a, node.ctype if node.op not in _MIXED else "double"))
        return pointwise_expr(node, vals, self.fast_math)

    # --- reductions -------------------------------------------------------------------------------------------
    def _inlined_reductions(self, node: Node) -> list[Node]:
        """Reductions ``node`` reads through pointwise and view nodes (what a kernel computing it would fuse)."""
        return self._inlined(node, lambda n: n.kind is OpKind.REDUCTION)

    def _inlined(self, node: Node, wanted: Callable[[Node], bool]) -> list[Node]:
        """The nodes ``wanted`` picks among those ``node`` reads through pointwise and view nodes not materialized,
        the walk stopping at each."""
        found: list[Node] = []
        stack, seen = [node], set()
        while stack:
            n = stack.pop()
            if id(n) in seen or id(n) in self.materialized:
                continue
            seen.add(id(n))
            if wanted(n):
                found.append(n)
            elif n.kind in (OpKind.POINTWISE, OpKind.VIEW):
                stack.extend(n.inputs())
        return found

    def _row_reduction(self, node: Node) -> Node | None:
        """A reduction of ``node``'s own shape (up to dims of size 1: keepdim is a view) that ``node`` reads."""
        squeezed = [n for n in node.shape if n != 1]
        return next(
            (
                r
                for r in self._inlined_reductions(node)
                if [n for n in r.shape if n != 1] == squeezed and r.attrs["dims"]
            ),
            None,
        )

    def _needs_staging(self, red: Node) -> bool:
        """Whether the reduction's input itself depends on reductions of another row structure: then the input is
        written once (its own row kernel) instead of every such reduction being recomputed per use."""
        src = red.args[0]
        return any(
            r.args[0].shape != src.shape or r.attrs["dims"] != red.attrs["dims"] for r in self._inlined_reductions(src)
        )

    def _expected(self, kernel: RowKernel, node: Node) -> Coords:
        dims = node.attrs["dims"]
        if len(node.shape) == len(kernel.shape):
            return tuple("0" if j in dims else f"i{j}" for j in range(len(kernel.shape)))
        return tuple(f"i{j}" for j in range(len(kernel.shape)) if j not in dims)

    def _fusable(self, kernel: RowKernel, node: Node, coords: Coords) -> bool:
        if node.args[0].shape != kernel.shape or kernel.dims not in (None, tuple(node.attrs["dims"])):
            return False
        if kernel.dims is None and kernel.full_outputs:
            return False
        if not node.attrs["dims"]:
            return False
        want = self._expected(kernel, node)
        return all(c == w or n == 1 for c, w, n in zip(coords, want, node.shape, strict=True))

    def _fuse_reduction(self, kernel: RowKernel, node: Node) -> str:
        for r in kernel.reductions:
            if r.node is node:
                return r.var
        if node.op not in REDUCTIONS:
            raise Unsupported(node.op)
        scope = Scope()
        coords = tuple(f"i{j}" for j in range(len(kernel.shape)))
        value = self.value(kernel, scope, node.args[0], coords)
        var = f"red{len(kernel.reductions)}"
        inner = "|".join(f"i{j}" for j in node.attrs["dims"])
        text = " ".join([*scope.stmts, value])
        invariant = not scope.identity_loads and re.search(rf"\b({inner})\b", text) is None
        kernel.reductions.append(FusedReduction(node, var, scope, value, invariant))
        return var

    # --- contractions -----------------------------------------------------------------------------------------
    def _diagonal_side(self, node: Node) -> int | None:
        """Which operand of a 2-D matmul is a diagonal matrix built in the graph (``torch.diag(d)`` traces to
        where(iota_i == iota_k, d, 0)), or None. diag(d) @ B is then a row scaling and A @ diag(d) a column
        scaling: exact, O(n^2) instead of O(n^3)."""
        if node.op != "mm":
            return None
        for side, operand in enumerate(node.args[:2]):
            if _is_diagonal(operand):
                return side
        return None

    def _diagonal_product(self, kernel: RowKernel, scope: Scope, node: Node, side: int, coords: Coords) -> str:
        diag, other = node.args[side], node.args[1 - side]
        i = coords[0] if side == 0 else coords[1]  # the row (left diag) or column (right diag) it scales
        d = self.value(kernel, scope, diag, (i, i))
        return f"({d} * {self.value(kernel, scope, other, coords)})"

    def _contiguous(self, node: Node) -> str:
        """A buffer holding ``node``'s elements contiguously in its shape: a reshape's is the buffer under it (a
        reshape keeps a contiguous buffer's element order), where a copy would move every element once more."""
        base = node
        while base.kind is OpKind.VIEW and base.op == "reshape" and id(base) not in self.materialized:
            base = base.args[0]
        return self.materialize(base)

    def _operand(self, node: Node) -> Operand:
        """How a product reads ``node``: a buffer through the strides of the views over it, and a scalar factor
        (``x * c`` read as x, c applied to the product's sum: SDPA scales both q and k by d^-1/4), where the views
        allow; otherwise ``node`` materialized contiguously. The buffer under the views is materialized where it is
        not yet: a transposed operand is then written once in its producer's order and read transposed, and a
        softmax reshaped into a batch of products is one kernel of its own rows (its statistics and outputs), not
        statistics staged for a copy in the reshaped rows."""
        base, strides, scale = node, None, 1.0
        chain: list[Node] = []
        while id(base) not in self.materialized:
            if base.kind is OpKind.VIEW and base.op in ("permute", "broadcast", "reshape"):
                chain.append(base)
                base = base.args[0]
            elif (factor := _scalar_factor(base)) is not None:
                scale, base = scale * factor[0], factor[1]
            else:
                break
        strides = contiguous_strides(base.shape)
        for view in reversed(chain):
            strides = _view_strides(view, strides)
            if strides is None:
                break
        if strides is None:  # an irregular view: materialize it contiguously first
            base, strides, scale = node, contiguous_strides(node.shape), 1.0
        buffer = self.materialize(base)
        return Operand(buffer, self.buffers[buffer], strides, scale)

    def _gemm(self, node: Node, out: str) -> GemmKernel:
        # The vendor call and our kernels read both operands as the product's type (mixed types would be casts first).
        if node.dtype not in ("float32", *HALF_TYPES) or any(x.dtype != node.dtype for x in node.args[:2]):
            raise Unsupported(f"{node.op} in {node.dtype}")
        a, b = (self._operand(x) for x in node.args[:2])
        ash, bsh = node.args[0].shape, node.args[1].shape
        batch = ash[0] if node.op == "bmm" else 1
        m, k, n = ash[-2], ash[-1], bsh[-1]
        kernel = GemmKernel("", node, a, b, out, batch, m, n, k, alpha=a.scale * b.scale)
        kernel.reads = {a.buffer: a.node, b.buffer: b.node}
        kernel.writes = {out: node}
        return kernel

    def _conv(self, node: Node, out: str) -> ConvKernel:
        if node.dtype not in ("float32", *HALF_TYPES) or any(a.dtype != node.dtype for a in node.args[:2]):
            raise Unsupported(f"convolution in {node.dtype}")
        x, w = (self._contiguous(a) for a in node.args[:2])
        kernel = ConvKernel("", node, x, w, out)
        kernel.reads = {x: node.args[0], w: node.args[1]}
        kernel.writes = {out: node}
        return kernel

    def _recurrence(self, node: Node, out: str) -> RecurrenceKernel:
        # An LSTM's cell state is carried in its output's type between steps, as float32 (or float64) keeps it
        if node.dtype not in ("float32", "float64") or any(a.dtype != node.dtype for a in node.args):
            raise Unsupported(f"{node.attrs['mode']} in {node.dtype}")
        operands = iter(node.args)
        gates, h0 = next(operands), next(operands)
        c0 = next(operands) if node.attrs["cell"] else None
        w_hh = next(operands)
        b_hh = next(operands) if node.attrs["bias"] else None
        buffers = {x: self._contiguous(x) for x in node.args}
        kernel = RecurrenceKernel(
            "",
            node,
            buffers[gates],
            buffers[h0],
            None if c0 is None else buffers[c0],
            buffers[w_hh],
            None if b_hh is None else buffers[b_hh],
            out,
        )
        kernel.reads = {b: x for x, b in buffers.items()}
        kernel.writes = {out: node}
        return kernel


# Kinds that a kernel of their own writes to a contiguous buffer: readers load them (through views, by strides).
_MATERIALIZED = frozenset({OpKind.REDUCTION, OpKind.CONTRACTION, OpKind.SCAN, OpKind.CONVOLUTION, OpKind.RECURRENCE})


# Pointwise ops whose operands keep their own types (the others' are converted to the result's).
_MIXED = frozenset(
    {"cast", "where", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "isnan"}
    | {"float_bits"}
)


def _own(kernel: RowKernel) -> Coords:
    """The coordinates of a kernel's own element."""
    return tuple(f"i{j}" for j in range(len(kernel.shape)))


def _view_strides(view: Node, strides: list[int]) -> list[int] | None:
    src = view.args[0].shape
    if view.op == "permute":
        return [strides[p] for p in view.attrs["perm"]]
    if view.op == "broadcast":
        lead = len(view.shape) - len(src)
        return [0] * lead + [
            0 if n == 1 and view.shape[lead + k] != 1 else s for k, (n, s) in enumerate(zip(src, strides, strict=True))
        ]
    if view.op == "reshape":
        return _reshape_strides(src, strides, view.shape)
    return None


def _reshape_strides(shape: tuple[int, ...], strides: list[int], new: tuple[int, ...]) -> list[int] | None:
    """Strides of ``new`` over the elements of a tensor of ``shape`` and ``strides``, in the same order, or None
    where no strides can (merged dims that are not contiguous with each other): ATen's computeStride. A GEMM then
    reads a batch flattened into its rows in place, with no copy first."""
    if math.prod(shape) == 0 or not shape:
        return contiguous_strides(new)
    out = [0] * len(new)
    view_d = len(new) - 1
    chunk_stride, tensor_numel, view_numel = strides[-1], 1, 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        # a chunk of dims contiguous with each other ends here
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new[view_d] == 1):
                out[view_d] = view_numel * chunk_stride
                view_numel *= new[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_stride, tensor_numel, view_numel = strides[d - 1], 1, 1
    return out if view_d == -1 else None


def _scalar_factor(node: Node) -> tuple[float, Node] | None:
    """(c, x) where ``node`` is x times the number c (or x divided by it), in x's own shape and type."""
    if node.kind is not OpKind.POINTWISE or node.op not in ("mul", "div") or len(node.args) != 2:
        return None
    x, c = node.args
    if node.op == "mul" and not isinstance(x, Node):
        x, c = c, x
    if isinstance(c, Node) and c.kind is OpKind.CONST and c.numel == 1:
        c = c.attrs["value"]
    if not isinstance(x, Node) or isinstance(c, Node | bool) or not isinstance(c, int | float) or c == 0:
        return None
    if x.shape != node.shape or x.dtype != node.dtype or not math.isfinite(c):
        return None
    return (float(c) if node.op == "mul" else 1.0 / c), x


# Views that move every element somewhere else in a tensor of as many elements (``_forward_coords`` maps them).
_BIJECTIVE = frozenset({"flip", "permute", "reshape"})


def _forward_coords(view: Node, coords: Coords) -> Coords:
    """Coordinates in ``view`` of the element at ``coords`` of its source (``view_coords`` the other way)."""
    if view.op == "flip":
        return view_coords(view, coords)  # its own inverse
    if view.op == "permute":
        return tuple(coords[p] for p in view.attrs["perm"])
    return reshape_coords(view.shape, view.args[0].shape, coords)


def _follow_views(node: Node, coords: Coords) -> tuple[Node, Coords]:
    while node.kind is OpKind.VIEW:
        node, coords = node.args[0], view_coords(node, coords)
    return node, coords


def _is_diagonal(node: Node) -> bool:
    """node[i, k] == (i == k ? x : 0) where the condition compares two unit-step iotas read at i and at k."""
    node, coords = _follow_views(node, ("I", "K"))
    if (
        len(node.shape) != 2
        or node.shape[0] != node.shape[1]
        or node.op != "where"
        or node.kind is not OpKind.POINTWISE
    ):
        return False
    cond, _, zero = node.args
    zero_value = zero.attrs.get("value") if isinstance(zero, Node) and zero.kind is OpKind.CONST else zero
    if zero_value != 0 or not isinstance(cond, Node):
        return False
    cond, ccoords = _follow_views(cond, broadcast_coords(cond.shape, node.shape, coords))
    if cond.op != "eq" or not all(isinstance(a, Node) for a in cond.args):
        return False
    read = []
    for arg in cond.args:
        iota, icoords = _follow_views(arg, broadcast_coords(arg.shape, cond.shape, ccoords))
        if iota.op != "iota" or iota.attrs["start"] != 0 or iota.attrs["step"] != 1:
            return False
        read.append(icoords[0])
    return sorted(read) == ["I", "K"]


_INTEGER = {
    "abs": "(({0}) < 0 ? -({0}) : ({0}))",
    # CUDA's floor and fmod of an integer are host-only overloads: integers round to themselves, C's % truncates
    # as fmod does, and remainder takes the divisor's sign (a roll's wrapped indices)
    "floor": "({0})",
    "ceil": "({0})",
    "trunc": "({0})",
    "round": "({0})",
    "fmod": "(({0}) % ({1}))",
    "remainder": "(((({0}) % ({1})) + ({1})) % ({1}))",
}


def pointwise_expr(node: Node, v: list[str], fast_math: bool = False) -> str:
    op, a, t = node.op, node.attrs, node.ctype

    def lit(x: float) -> str:
        return c_literal(x, t)

    if op == "pow" and len(node.args) == 2 and not isinstance(node.args[1], Node) and node.args[1] in (2, 2.0):
        return f"({v[0]} * {v[0]})"
    if op == "div" and a.get("rounded") == "floor" and t in ("int64_t", "int32_t"):
        q, r = f"(({v[0]}) / ({v[1]}))", f"(({v[0]}) % ({v[1]}))"
        return f"({q} - (({r} != 0) && ((({v[0]}) < 0) != (({v[1]}) < 0))))"
    divisor = node.args[1] if op == "div" and len(node.args) == 2 and not a.get("rounded") else None
    if isinstance(divisor, int | float) and 1e-30 <= abs(divisor) <= 1e30 and t in ("float", "double"):
        # By a constant: a product with its reciprocal, as ATen does for a scalar divisor (within an ulp of the
        # quotient). IEEE division is a dozen instructions with a range check and a slow path besides.
        return f"(({v[0]}) * {lit(1.0 / divisor)})"
    if fast_math and t == "float" and op in FAST_FLOAT and not a.get("rounded"):
        return FAST_FLOAT[op].format(*v)
    if t in ("int64_t", "int32_t") and op in _INTEGER:  # CUDA's fabs takes floating point only
        return _INTEGER[op].format(*v)
    if op in UNARY:
        return UNARY[op].format(*v)
    if op in BINARY:
        return BINARY[op].format(*v)
    if op == "cast" and node.dtype in HALF_TYPES:
        # Rounded to the 16-bit type as the reference's cast rounds it, though the value goes on in float.
        _, load, store = HALF_TYPES[node.dtype]
        return f"{load}({store}((float)({v[0]})))"
    if op == "cast":
        return f"(({t})({v[0]}))"
    if op == "clamp":
        out = v[0]
        for bound, pick in (("min", "maximum"), ("max", "minimum")):
            if a[bound] is not None:
                out = pointwise_expr(Node("", pick, OpKind.POINTWISE, node.shape, node.dtype), [out, lit(a[bound])])
        return out
    if op == "gelu":
        if a["approximate"] == "tanh":
            return (
                f"({lit(0.5)} * {v[0]} * ({lit(1.0)} + tanh({lit(0.7978845608028654)} * "
                f"({v[0]} + {lit(0.044715)} * {v[0]} * {v[0]} * {v[0]}))))"
            )
        return f"({lit(0.5)} * {v[0]} * ({lit(1.0)} + erf({v[0]} * {lit(0.7071067811865476)})))"
    if op == "leaky_relu":
        return f"({v[0]} > 0 ? {v[0]} : {lit(a['slope'])} * {v[0]})"
    if op == "elu":
        return (
            f"({v[0]} > 0 ? {lit(a['scale'])} * {v[0]} : "
            f"{lit(a['scale'] * a['alpha'])} * expm1({lit(a['input_scale'])} * {v[0]}))"
        )
    if op == "softplus":
        bx = f"({lit(a['beta'])} * {v[0]})"
        return f"({bx} > {lit(a['threshold'])} ? {v[0]} : log1p(exp({bx})) / {lit(a['beta'])})"
    if op == "threshold":
        return f"({v[0]} > {lit(a['threshold'])} ? {v[0]} : {lit(a['value'])})"
    if op == "lerp":
        return f"({v[0]} + {lit(a['weight'])} * ({v[1]} - {v[0]}))"
    raise Unsupported(op)


# Frames the planner may nest. Values are built by recursion over producers, each kernel's expression at most
# FUSION_DEPTH deep (``_bound_fusion``), but a kernel planned while another is (a product's operand, a norm's
# statistics) nests its own: a transformer's layers nested past Python's default of 1000 frames. Python calls of
# Python functions take no C stack (3.11 on), so the limit is Python's own count.
PLAN_FRAMES = 50_000


def plan_graph(graph: Graph, fast_math: bool = False) -> Plan:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, PLAN_FRAMES))
    try:
        return Planner(graph, fast_math).plan()
    finally:
        sys.setrecursionlimit(limit)


def fuse_epilogues(plan: Plan, own: Callable[[GemmKernel | ConvKernel], bool]) -> Plan:
    """The plan with each elementwise kernel that only finishes a product's or a convolution's output (a bias, an
    activation, a residual) made that kernel's epilogue, where ``own`` says our kernel runs it (a vendor library
    stores its output as it is). The elementwise kernel must come right after it (so everything else it reads is
    ready), span the output's shape, read the output only at its own element, and be its only reader; the output's
    buffer is then never made."""
    readers: dict[str, int] = {}
    for k in plan.kernels:
        for b in k.reads:
            readers[b] = readers.get(b, 0) + 1
    kernels: list[Kernel] = []
    buffers = dict(plan.buffers)
    pending = list(plan.kernels)
    while pending:
        k = pending.pop(0)
        after = pending[0] if pending else None
        if (
            isinstance(k, GemmKernel | ConvKernel)
            and isinstance(after, RowKernel)
            and _finishes(after, k.out, k.node.shape)
            and k.out not in plan.outputs
            and readers.get(k.out) == 1
            and own(k)
        ):
            pending.pop(0)
            del buffers[k.out]
            reads = {**k.reads, **{b: n for b, n in after.reads.items() if b != k.out}}
            k = replace(k, reads=reads, writes=dict(after.writes), epilogue=after)
        kernels.append(k)
    return replace(plan, kernels=kernels, buffers=buffers)


def _finishes(kernel: RowKernel, buffer: str, shape: tuple[int, ...]) -> bool:
    """Whether ``kernel`` is elementwise over ``shape`` and reads ``buffer`` only at its own element."""
    scope = kernel.out_scope
    at_others = re.compile(rf"\b{buffer}\[")
    return (
        not kernel.reduced
        and kernel.scan is None
        and kernel.shape == shape
        and buffer in scope.identity_loads
        and not any(at_others.search(stmt) for stmt in scope.stmts)
    )
