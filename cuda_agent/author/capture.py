"""Capture: the reference Model, built on the meta device from the problem's own code, traced to an aten graph.

Nothing is allocated: ``get_init_inputs``/``get_inputs`` and ``Model.__init__`` run under ``torch.device("meta")``
(problems may have multi-GB inputs), then ``make_fx`` traces ``forward`` with the module's parameters and buffers
as explicit graph inputs (``torch.func.functional_call``), so a kernel reads them rather than baked constants.
Composite operations are decomposed until only what ir.py classifies is left: softmax, norms and variances become
reductions and pointwise arithmetic, which plan.py fuses back together.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch
from torch._decomp import core_aten_decompositions, get_decompositions
from torch.func import functionalize
from torch.fx.experimental.proxy_tensor import make_fx
from torch.overrides import TorchFunctionMode

from cuda_agent.author.ir import BINARY, DTYPES, REDUCTIONS, UNARY, Graph, Node, OpKind, Unsupported
from cuda_agent.problem import ProblemError, call_inputs, load_problem, model_on_meta, on_meta

aten = torch.ops.aten
prims = torch.ops.prims

# Pointwise ops with parameters, emitted by emit.py's templates (attrs carry the parameters).
PARAMETRIC = frozenset(
    {"gelu", "leaky_relu", "elu", "softplus", "hardtanh", "clamp", "threshold", "cast", "lerp", "copy"}
)
_VIEWS = frozenset(
    {"view", "_unsafe_view", "reshape", "expand", "permute", "unsqueeze", "squeeze", "broadcast_in_dim", "t",
     "transpose", "slice", "select", "flip"}
)  # fmt: skip
_CONSTS = frozenset(
    {"full", "scalar_tensor", "zeros", "ones", "full_like", "zeros_like", "ones_like", "empty", "empty_like",
     "empty_permuted"}
)  # fmt: skip
# Ops returning (values, indices) whose values the author computes; a graph using the indices is unsupported.
_VALUES_OF = frozenset(
    {
        aten.max_pool2d_with_indices.default,
        aten.max_pool3d_with_indices.default,
        aten.adaptive_max_pool2d.default,
        aten.adaptive_max_pool3d.default,
        aten.cummax.default,  # a running max's values (a max scan); where each was found is beyond the author
        aten.cummin.default,
    }
)
_OPERAND = (torch.fx.Node, bool, int, float)
# Recurrent layers (torch._VF's calls, one a module) become per layer the input's projection (both directions'), a
# product over every step at once, and a ``recurrence`` node of the rest (``_recurrent_layers``): traced as torch
# runs them, they were every cell unrolled (an LSTM step came to ~5 kernels and 26 KB of source; a 6-layer LSTM over
# 512 steps took 8-11 min to trace, 70,720 nodes, and 80 MB of source no build finishes).
_RECURRENT = {
    torch._VF.lstm: "lstm",
    torch._VF.gru: "gru",
    torch._VF.rnn_tanh: "rnn_tanh",
    torch._VF.rnn_relu: "rnn_relu",
}
_CASTS = frozenset({"_to_copy", "convert_element_type", "to", "type_as"})


def _reduced_count(x: torch.Tensor, dim: Sequence[int] | int | None) -> int:
    dims = range(x.dim()) if dim is None or (isinstance(dim, Sequence) and len(dim) == 0) else dim
    dims = [dims] if isinstance(dims, int) else list(dims)
    return math.prod(x.shape[d] for d in dims) if x.dim() else 1


def _all_dims(x: torch.Tensor, dim: Sequence[int] | int | None) -> list[int]:
    if dim is None or (isinstance(dim, Sequence) and len(dim) == 0):
        return list(range(x.dim()))
    return [dim] if isinstance(dim, int) else list(dim)


def _mean(x: torch.Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> torch.Tensor:
    return aten.sum.dim_IntList(x, _all_dims(x, dim), keepdim) / _reduced_count(x, dim)


def _var_mean(
    x: torch.Tensor, dim: Any = None, *, correction: float | None = None, keepdim: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    dims, n = _all_dims(x, dim), _reduced_count(x, dim)
    divisor = max(n - (1 if correction is None else correction), 0)
    if x.dtype == torch.float64:
        # Two passes over the row (mean, then squared deviations): the numerically safe form in the widest type.
        mean = aten.sum.dim_IntList(x, dims, True) / n
        dev = x - mean
        var = aten.sum.dim_IntList(dev * dev, dims, keepdim) / divisor
        return var, mean if keepdim else aten.squeeze.dims(mean, dims)
    # One pass: the sum and the sum of squares, independent reductions that share a pass over the row (the row is
    # read once for its statistics, not twice). Accumulated in double, the difference E[x^2] - E[x]^2 keeps
    # single precision unless the mean exceeds the spread by some 10^4; clamped at 0 against a rounding below it.
    wide = aten._to_copy(x, dtype=torch.float64)
    total = aten.sum.dim_IntList(wide, dims, True)
    mean = total / n
    var = aten.clamp_min(aten.sum.dim_IntList(wide * wide, dims, True) - total * mean, 0) / divisor
    var, mean = aten._to_copy(var, dtype=x.dtype), aten._to_copy(mean, dtype=x.dtype)
    return (var, mean) if keepdim else (aten.squeeze.dims(var, dims), aten.squeeze.dims(mean, dims))


def _var(x: torch.Tensor, dim: Any = None, *, correction: float | None = None, keepdim: bool = False) -> torch.Tensor:
    return _var_mean(x, dim, correction=correction, keepdim=keepdim)[0]


def _arg_extreme(extreme: Any, x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    """argmax / argmin as reductions the author fuses: the extreme, then the smallest index holding it (torch
    returns the first of ties)."""
    if dim is None:  # over all elements, in row-major order
        flat = _arg_extreme(extreme, aten.reshape(x, [-1]), 0)
        return aten.reshape(flat, [1] * x.dim()) if keepdim else flat
    dim %= max(x.dim(), 1)
    n = x.shape[dim]
    along = [n if d == dim else 1 for d in range(x.dim())]
    index = aten.reshape(aten.arange(n, dtype=torch.int64, device=x.device), along)
    if x.dtype in (torch.float32, torch.bfloat16, torch.float16):
        return _packed_arg_extreme(extreme is aten.amax, x, index, dim, keepdim)
    hits = aten.where(aten.eq(x, extreme(x, [dim], True)), index, n)
    return aten.amin(hits, [dim], keepdim)


def _packed_arg_extreme(largest: bool, x: torch.Tensor, index: torch.Tensor, dim: int, keepdim: bool) -> torch.Tensor:
    """argmax / argmin of floats as one reduction, one pass over ``x`` instead of the extreme's and then the index's:
    a 64-bit key per element, its value's order in the high half (the float's bits made monotone: a negative one's
    magnitude bits reversed), its index in the low half (reversed for a maximum), so that the extreme key holds the
    first index of the extreme value. -0.0 counts as 0.0 (they are equal, the first of them wins) and a NaN beats
    everything (torch returns the first NaN's index)."""
    value = x if x.dtype == torch.float32 else aten._to_copy(x, dtype=torch.float32)
    value = aten.where(aten.eq(value, 0), 0.0, value)
    bits = aten.view.dtype(value, torch.int32)
    ordered = aten.where(aten.ge(bits, 0), bits, aten.bitwise_xor(bits, 0x7FFFFFFF))
    ordered = aten.where(aten.isnan(value), 0x7FFFFFFF if largest else -0x80000000, ordered)
    low = aten.sub(0xFFFFFFFF, index) if largest else index
    key = aten.add(aten.mul(aten._to_copy(ordered, dtype=torch.int64), 1 << 32), low)
    found = aten.bitwise_and((aten.amax if largest else aten.amin)(key, [dim], keepdim), 0xFFFFFFFF)
    return aten.sub(0xFFFFFFFF, found) if largest else found


def _addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: Any = 1, alpha: Any = 1) -> torch.Tensor:
    # torch's own decomposition upcasts 16-bit operands to float32 first: the product would leave the tensor cores
    # and two casts would be kernels of their own. Here the product keeps its type; the epilogue (scaling, bias) is
    # computed in float all the same.
    product = aten.mm(a, b)
    if alpha != 1:
        product = aten.mul(product, alpha)
    if beta == 0:
        return product
    return aten.add(product, bias if beta == 1 else aten.mul(bias, beta))


def _col2im(
    col: torch.Tensor,
    output_size: Sequence[int],
    kernel_size: Sequence[int],
    dilation: Sequence[int],
    padding: Sequence[int],
    stride: Sequence[int],
) -> torch.Tensor:
    """F.fold: each kernel tap's patch values placed on the (padded) output at that tap's offset and the blocks'
    stride, summed over the taps in order, then the padding cropped: a sum of strided slice_scatters the planner
    reads element by element (torch's own decomposition accumulates by index_put, a scatter)."""
    blocks = col if col.dim() == 3 else col.unsqueeze(0)
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = output_size, kernel_size, dilation, padding, stride
    rows, cols = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    n, channels = blocks.shape[0], blocks.shape[1] // (kh * kw)
    taps = blocks.reshape(n, channels, kh, kw, rows, cols)
    hp, wp = h + 2 * ph, w + 2 * pw
    padded = blocks.new_zeros(n, channels, hp, wp)
    for i in range(kh):
        for j in range(kw):
            at_rows = (i * dh, i * dh + sh * (rows - 1) + 1, sh)
            tap = aten.slice_scatter(blocks.new_zeros(n, channels, hp, cols), taps[:, :, i, j], 2, *at_rows)
            at_cols = (j * dw, j * dw + sw * (cols - 1) + 1, sw)
            padded = padded + aten.slice_scatter(blocks.new_zeros(n, channels, hp, wp), tap, 3, *at_cols)
    out = padded[:, :, ph : ph + h, pw : pw + w]
    return out if col.dim() == 3 else out.squeeze(0)


def _pdist(x: torch.Tensor, p: float = 2.0) -> torch.Tensor:
    """The distances of the n rows' pairs i < j, row-major: pair k's rows come from k by the inverse of the
    triangular numbers (in float64, exact for any n whose pairs fit a tensor), then the norm of their difference."""
    n = x.shape[0]
    k = torch.arange(n * (n - 1) // 2, dtype=torch.float64, device=x.device)
    i = n - 2 - torch.floor(torch.sqrt(-8 * k + 4 * n * (n - 1) - 7) / 2 - 0.5)
    j = k + i + 1 - n * (n - 1) // 2 + (n - i) * (n - i - 1) / 2
    return torch.linalg.vector_norm(x[i.long()] - x[j.long()], ord=p, dim=-1)


def _cdist(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode: int | None = None) -> torch.Tensor:
    """Distances between the rows of x1 and x2, as torch computes them: Euclidean ones in the product's form where
    torch takes it (asked for, or either side over 25 rows unless forbidden): the squared norms less twice the
    product (a GEMM), clamped at 0; any other as the norm of each pair's difference (a reduction of a broadcast)."""
    if p == 2 and (compute_mode == 1 or (compute_mode in (None, 0) and max(x1.shape[-2], x2.shape[-2]) > 25)):
        squares1 = torch.sum(x1 * x1, dim=-1, keepdim=True)
        squares2 = torch.sum(x2 * x2, dim=-1).unsqueeze(-2)
        return torch.sqrt(torch.clamp_min(squares1 + squares2 - 2 * x1 @ x2.mT, 0))
    return torch.linalg.vector_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), ord=p, dim=-1)


def _rrelu(
    x: torch.Tensor,
    noise: torch.Tensor,
    lower: float = 1 / 8,
    upper: float = 1 / 3,
    training: bool = False,
    generator: Any = None,
) -> torch.Tensor:
    """RReLU in eval mode: a leaky ReLU of the slopes' mean, its noise buffer untouched (in training, slopes are
    drawn at random)."""
    if training:
        raise Unsupported("rrelu in training mode (random slopes)")
    return aten.leaky_relu(x, (lower + upper) / 2)


def _trilinear(
    i1: torch.Tensor,
    i2: torch.Tensor,
    i3: torch.Tensor,
    expand1: list[int],
    expand2: list[int],
    expand3: list[int],
    sumdim: list[int],
    unroll_dim: int = 1,
) -> torch.Tensor:
    """The three operands unsqueezed at their expand dims, multiplied and summed over ``sumdim``. torch.bilinear's
    form (out[b, o] = sum_ij x1[b, i] W[o, i, j] x2[b, j]) as a product x1 @ W (i by o j) and then sums over j of
    rows against x2: the contraction on our GEMM, and no b by o by i by j product for a reduction to read."""
    if (list(expand1), list(expand2), list(expand3), list(sumdim)) == ([1, 3], [0], [1, 2], [2, 3]):
        rows, (out, left, right) = i1.shape[0], i2.shape
        weight = aten.reshape(aten.permute(i2, [1, 0, 2]), [left, out * right])
        product = aten.reshape(aten.mm(i1, weight), [rows, out, right])
        return aten.sum(aten.mul(product, aten.unsqueeze(i3, 1)), [2])
    operands = []
    for operand, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        for dim in sorted(expand):
            operand = aten.unsqueeze(operand, dim)
        operands.append(operand)
    return aten.sum(aten.mul(aten.mul(operands[0], operands[1]), operands[2]), list(sumdim))


def decompositions() -> dict[Any, Callable[..., Any]]:
    table = dict(core_aten_decompositions())
    table.update(
        get_decompositions(
            [
                aten._softmax,
                aten._log_softmax,
                aten.native_layer_norm,
                aten.native_group_norm,
                aten._native_batch_norm_legit_no_training,
                aten.native_batch_norm,
                aten._native_batch_norm_legit,
                aten.logsumexp,
                aten.rsub,
                aten.linalg_vector_norm,
                aten.silu,
                aten.hardsigmoid,
                aten.hardswish,
                aten.repeat,  # an expand and a reshape
                # interpolation: gathers at computed positions, weighted (the "index" ops plan.py reads)
                aten.upsample_linear1d,
                aten.upsample_bilinear2d,
                aten.upsample_trilinear3d,
                aten.upsample_bicubic2d,
                aten.grid_sampler_2d,
            ]
        )
    )
    table[aten.addmm.default] = _addmm
    for op in (aten.mean.dim, aten.mean.default):
        table[op] = _mean
    table[aten.var_mean.correction] = _var_mean
    table[aten.var.correction] = _var
    table[aten.argmax.default] = functools.partial(_arg_extreme, aten.amax)
    table[aten.argmin.default] = functools.partial(_arg_extreme, aten.amin)
    table[aten.max.dim] = functools.partial(_extreme_with_index, aten.amax)
    table[aten.min.dim] = functools.partial(_extreme_with_index, aten.amin)
    # Pieces of a tensor (chunk, split, unbind) as the slices and selects they are: views the planner reads through.
    table[aten.split_with_sizes.default] = _split_with_sizes
    table[aten.split.Tensor] = _split
    table[aten.unbind.int] = _unbind
    table[aten._pdist_forward.default] = _pdist
    table[aten.col2im.default] = _col2im
    table[aten._cdist_forward.default] = _cdist
    table[aten.rrelu_with_noise.default] = _rrelu
    table[aten._trilinear.default] = _trilinear
    table[aten.unfold.default] = _unfold
    return table


def _unfold(x: torch.Tensor, dim: int, size: int, step: int) -> torch.Tensor:
    """Tensor.unfold, the windows along ``dim`` as a new last dim (an image's patches): windows side by side
    (step = size) are the dim reshaped into (windows, size), then a permute; overlapping or gapped ones are
    ``size`` strided slices, stacked."""
    dim %= max(x.dim(), 1)
    count = (x.shape[dim] - size) // step + 1
    if step == size:
        tiled = aten.reshape(aten.slice(x, dim, 0, count * size), [*x.shape[:dim], count, size, *x.shape[dim + 1 :]])
        return aten.permute(tiled, [*range(dim + 1), *range(dim + 2, tiled.dim()), dim + 1])
    return aten.stack([aten.slice(x, dim, j, j + step * (count - 1) + 1, step) for j in range(size)], -1)


def _extreme_with_index(
    extreme: Any, x: torch.Tensor, dim: int, keepdim: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """max.dim / min.dim: the values, and the first index holding each (traced only where the indices are used)."""
    return extreme(x, [dim], keepdim), _arg_extreme(extreme, x, dim, keepdim)


def _split_with_sizes(x: torch.Tensor, sizes: Sequence[int], dim: int = 0) -> list[torch.Tensor]:
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    return [aten.slice(x, dim, start, start + size) for start, size in zip(starts, sizes, strict=True)]


def _split(x: torch.Tensor, size: int, dim: int = 0) -> list[torch.Tensor]:
    n = x.shape[dim]
    return _split_with_sizes(x, [min(size, n - start) for start in range(0, n, size)] or [0], dim)


def _unbind(x: torch.Tensor, dim: int = 0) -> list[torch.Tensor]:
    return [aten.select(x, dim, i) for i in range(x.shape[dim])]


class _ForwardOnlyContext:
    """The ctx a legacy autograd.Function's forward gets when only its outputs are traced: it keeps the attributes
    forward sets and ignores what only backward would need."""

    needs_input_grad: tuple[bool, ...] = ()

    def save_for_backward(self, *tensors: Any) -> None:
        pass

    def mark_dirty(self, *tensors: Any) -> None:
        pass

    def mark_non_differentiable(self, *tensors: Any) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        pass


@contextlib.contextmanager
def _legacy_functions_inlined() -> Iterator[None]:
    """autograd.Functions in the legacy style (``forward(ctx, ...)`` without ``setup_context``, as
    torch.nn.CrossMapLRN2d's and much research code's) refuse functorch's transforms, functionalize among them. The
    trace wants their outputs only: while it runs, their ``apply`` runs ``forward`` as plain code."""
    legacy = torch.autograd.function._SingleLevelFunction.setup_context
    patched, stack = [], list(torch.autograd.Function.__subclasses__())
    while stack:
        cls = stack.pop()
        stack += cls.__subclasses__()
        if cls.setup_context is legacy and "apply" not in cls.__dict__:
            cls.apply = classmethod(lambda c, *args: c.forward(_ForwardOnlyContext(), *args))
            patched.append(cls)
    try:
        yield
    finally:
        for cls in patched:
            del cls.apply


@torch.library.custom_op(
    "cuda_agent::recurrence",
    mutates_args=(),
    schema="(Tensor gates, Tensor h0, Tensor? c0, Tensor w_hh, Tensor? b_hh, str mode) -> Tensor",
)
def recurrence(
    gates: torch.Tensor,
    h0: torch.Tensor,
    c0: torch.Tensor | None,
    w_hh: torch.Tensor,
    b_hh: torch.Tensor | None,
    mode: str,
) -> torch.Tensor:
    """One layer of a recurrent layer after its input's projection, in D directions (1, or 2: the second from the
    last step back): ``gates`` [steps, batch, D x G x hidden] (the projection and its bias, G = ir.GATES[mode]) plus
    ``w_hh[d]`` h + ``b_hh[d]`` each step ([D, G x hidden, hidden], [D, G x hidden]), through the cell of ``mode``
    (torch's gate order: LSTM i, f, g, o; GRU r, z, n), from ``h0`` (and an LSTM's ``c0``), [D, batch, hidden].
    Returns each step's hidden states at the step, [steps, batch, D x hidden] (the layer's output, directions side
    by side), and an LSTM's last cell states after them (one row more). This is what the kernels compute (emit.py);
    here it defines the op for torch."""
    (steps, _, _), (directions, _, hidden) = gates.shape, h0.shape
    out = _states_like(gates, h0, mode)
    for d in range(directions):
        h, c = h0[d], h0[d] if c0 is None else c0[d]  # (the cell state an LSTM's only)
        for s in range(steps):
            t = steps - 1 - s if d else s
            hh = h @ w_hh[d].t() if b_hh is None else h @ w_hh[d].t() + b_hh[d]
            x = gates[t].chunk(directions, -1)[d]
            if mode == "lstm":
                i, f, g, o = (x + hh).chunk(4, -1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
            elif mode == "gru":
                (xr, xz, xn), (hr, hz, hn) = x.chunk(3, -1), hh.chunk(3, -1)
                r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
                h = (1 - z) * torch.tanh(xn + r * hn) + z * h
            else:
                h = torch.tanh(x + hh) if mode == "rnn_tanh" else torch.relu(x + hh)
            out[t, :, d * hidden : (d + 1) * hidden] = h
        if mode == "lstm":
            out[steps, :, d * hidden : (d + 1) * hidden] = c
    return out


def _states_like(gates: torch.Tensor, h0: torch.Tensor, mode: str) -> torch.Tensor:
    """``recurrence``'s output, uninitialized: each step's hidden states, and an LSTM's cell states after them."""
    directions, batch, hidden = h0.shape
    return gates.new_empty((gates.shape[0] + (mode == "lstm"), batch, directions * hidden))


recurrence.register_fake(lambda gates, h0, c0, w_hh, b_hh, mode: _states_like(gates, h0, mode))


def _joined(pieces: list[torch.Tensor], stacked: bool) -> torch.Tensor:
    """Each direction's parameter of one kind joined: stacked, or concatenated; one direction's as it is (a view: no
    copy to make)."""
    if len(pieces) == 1:
        return pieces[0][None] if stacked else pieces[0]
    return torch.stack(pieces) if stacked else torch.cat(pieces)


def _recurrent_layers(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """A recurrent layer's call as what it computes, layer by layer: the input's projection over every step, both
    directions' at once (one product: a step's gates do not wait on the step before for it), and a ``recurrence``
    node for the rest, both directions side by side (they do not wait on each other: a GPU runs them at once, and
    their outputs are the next layer's input as they lie). A packed sequence's call (data, batch_sizes, hx, params,
    ...) is traced as it comes."""
    if kwargs or isinstance(args[3], list | tuple) or args[0].dim() != 3:
        return func(*args, **kwargs)
    mode = _RECURRENT[func]
    x, hx, params, has_biases, layers, dropout, train, bidirectional, batch_first = args
    if train and dropout and layers > 1:
        raise Unsupported(f"{mode}: dropout between layers in training mode (random)")
    directions, per = 1 + bool(bidirectional), 4 if has_biases else 2
    if len(params) != layers * directions * per:
        raise Unsupported(f"{mode} with projections (proj_size)")
    h0, c0 = hx if mode == "lstm" else (hx, None)
    x = x.transpose(0, 1) if batch_first else x
    steps, hidden = x.shape[0], h0.shape[-1]
    last_h, last_c = [], []
    for layer in range(layers):
        ways = [params[(layer * directions + d) * per :][:per] for d in range(directions)]
        w_ih, w_hh = _joined([w[0] for w in ways], False), _joined([w[1] for w in ways], True)
        b_ih = _joined([w[2] for w in ways], False) if has_biases else None
        b_hh = _joined([w[3] for w in ways], True) if has_biases else None
        mine = slice(layer * directions, (layer + 1) * directions)
        cells = None if c0 is None else c0[mine]
        states = recurrence(torch.nn.functional.linear(x, w_ih, b_ih), h0[mine], cells, w_hh, b_hh, mode)
        x = states[:steps]
        for d in range(directions):  # the last step of each direction: the first one taken backwards
            last_h.append(states[0 if d else steps - 1, :, d * hidden : (d + 1) * hidden])
            if mode == "lstm":
                last_c.append(states[steps, :, d * hidden : (d + 1) * hidden])
    out = (x.transpose(0, 1) if batch_first else x, torch.stack(last_h))
    return (*out, torch.stack(last_c)) if mode == "lstm" else out


def _scalar_tensor(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """``torch.tensor(0.5)`` in forward, made as ``torch.full`` of that value: a tensor built from Python data on
    the meta device keeps no values, so the trace would hold an unknown constant; a full one is a constant the
    planner inlines. Tensors of several values stay as they are (and the trace refuses them)."""
    if args and type(args[0]) in (bool, int, float):
        value = args[0]
        default = {bool: torch.bool, int: torch.int64, float: torch.get_default_dtype()}[type(value)]
        return torch.full((), value, dtype=kwargs.get("dtype") or default, device=kwargs.get("device"))
    return func(*args, **kwargs)


def _fixed_bags(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """EmbeddingBag over a 2-d input (bags of one size, no offsets) as the lookup and a reduction over each bag:
    what torch computes, padding_idx's entries left out of sums, means and maxima (a bag of padding alone gives
    zeros). Bags given by offsets have sizes known only from data (the trace refuses them)."""
    bound = inspect.signature(torch.nn.functional.embedding_bag).bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    x, weight, mode, padding_idx = a["input"], a["weight"], a["mode"], a["padding_idx"]
    if x.dim() != 2 or a["offsets"] is not None or a["max_norm"] is not None:
        return func(*args, **kwargs)
    rows = torch.nn.functional.embedding(x, weight)
    if a["per_sample_weights"] is not None:
        rows = rows * a["per_sample_weights"].unsqueeze(-1)
    if padding_idx is None:
        reductions: dict[str, Callable[..., torch.Tensor]] = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax}
        return reductions[mode](rows, dim=1)
    kept = (x != (padding_idx % weight.shape[0])).unsqueeze(-1)
    if mode == "max":
        peak = torch.amax(rows.masked_fill(~kept, float("-inf")), dim=1)
        return torch.where(kept.any(dim=1), peak, 0.0)
    total = torch.sum(rows * kept, dim=1)
    return total if mode == "sum" else total / torch.clamp_min(kept.sum(dim=1), 1)


class _Rewrites(TorchFunctionMode):
    """Calls the trace takes in another form than torch's own: by function, the rewrite that takes its arguments."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        rewrite = _REWRITES.get(func)
        return rewrite(func, args, kwargs or {}) if rewrite else func(*args, **(kwargs or {}))


_REWRITES: dict[Any, Callable[[Any, Any, dict[str, Any]], Any]] = {
    torch.tensor: _scalar_tensor,
    torch.as_tensor: _scalar_tensor,
    torch.nn.functional.embedding_bag: _fixed_bags,
    **dict.fromkeys(_RECURRENT, _recurrent_layers),
}


def tensor_attributes(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Tensors the model's modules hold as plain attributes, neither parameters nor buffers, by qualified name
    (``self.h0 = torch.randn(...)`` for an LSTM's initial state): made by the constructor like its parameters, read
    by ``forward`` like them, but outside the state_dict and left behind by ``Module.to``."""
    found = {}
    for prefix, module in model.named_modules():
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                found[f"{prefix}.{name}" if prefix else name] = value
    return found


def trace_module(model: torch.nn.Module, inputs: list[Any]) -> Graph:
    """The aten graph of ``model(*inputs)`` (meta tensors), parameters and buffers as named graph inputs."""
    attributes = tensor_attributes(model)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers()), **attributes}
    names = list(state)
    tensor_pos = [i for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)]

    def call(flat_state: list[torch.Tensor], *tensors: torch.Tensor) -> Any:
        args = list(inputs)
        for pos, t in zip(tensor_pos, tensors, strict=True):
            args[pos] = t
        return torch.func.functional_call(model, dict(zip(names, flat_state, strict=True)), tuple(args))

    with on_meta(), torch.no_grad(), _legacy_functions_inlined(), _Rewrites():
        try:
            # Functionalized: in-place ops (ReLU(inplace=True), x.add_) become their pure forms, and the updates
            # of buffers (batch norm's running statistics in training mode) become copies back at the end. The
            # decompositions run beneath that and may mutate temporaries of their own (rms_norm's add_): a second
            # pass over the traced graph makes those pure too.
            args = ([state[n] for n in names], *[inputs[i] for i in tensor_pos])
            traced = make_fx(functionalize(call, remove="mutations"), decomposition_table=decompositions())(*args)
            gm = make_fx(functionalize(traced, remove="mutations"))(*args)
        except Unsupported:
            raise
        except Exception as exc:  # the reference itself cannot be traced on meta tensors
            raise Unsupported(f"tracing: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from None
        result = call([state[n] for n in names], *[inputs[i] for i in tensor_pos])
    single = isinstance(result, torch.Tensor)
    if not single and not (isinstance(result, list | tuple) and all(isinstance(r, torch.Tensor) for r in result)):
        raise Unsupported(f"output of type {type(result).__name__} (a tensor or a tuple of tensors is expected)")
    graph = _to_ir(gm, names, len(dict(model.named_parameters())), tensor_pos, len(inputs), single, set(attributes))
    saved = set(model.state_dict())
    for node in graph.params:  # a buffer left out of state_dict (non-persistent) cannot come from the reference's
        node.attrs["persistent"] = node.attrs["qualname"] in saved
    return graph


def capture_problem(source: str) -> Graph:
    """Load the problem's code and trace its Model on the meta device."""
    try:
        problem = load_problem(source, name="author_problem", filename="model.py")
        with on_meta(), torch.no_grad():
            init_inputs = call_inputs(problem.get_init_inputs, "get_init_inputs")
            model = model_on_meta(problem, init_inputs)
            inputs = call_inputs(problem.get_inputs, "get_inputs")
    except ProblemError as exc:
        raise Unsupported(f"problem: {exc}") from None
    except Exception as exc:
        raise Unsupported(f"problem on the meta device: {type(exc).__name__}: {exc}") from None
    if not isinstance(model, torch.nn.Module):
        raise Unsupported("Model is not an nn.Module")
    return trace_module(model, list(inputs))


def _dtype(value: Any, where: str) -> str:
    name = str(value.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise Unsupported(f"dtype {name} ({where})")
    return name


def _to_ir(
    gm: torch.fx.GraphModule,
    names: list[str],
    n_params: int,
    tensor_pos: list[int],
    arg_count: int,
    single: bool,
    attributes: set[str],
) -> Graph:
    # The copies back into buffers and inputs are state for the next call, which the judged outputs of this one do
    # not read: the author leaves them out (and with them what computes them, such as running statistics).
    for fx in list(gm.graph.nodes):
        if fx.target is aten.copy_.default and fx.args[0].op == "placeholder" and not fx.users:
            gm.graph.erase_node(fx)
    gm.graph.eliminate_dead_code()  # unused outputs of multi-output ops (pooling indices) are not asked for
    env: dict[torch.fx.Node, Node] = {}
    nodes: list[Node] = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    params: list[Node] = []
    inputs: list[Node] = []

    seen: dict[tuple[Any, ...], Node] = {}

    def add(node: Node) -> Node:
        # A value computed twice is one node (x.mean() and the mean inside x.std() are one reduction): the planner
        # then reads or reduces it once instead of making another pass over its source. An input or parameter is in
        # the graph from the start (a converter may answer with one: a slice of a scattered input is the input).
        if node.kind in (OpKind.INPUT, OpKind.PARAM):
            return node
        key = _cse_key(node)
        if key in seen:
            return seen[key]
        seen[key] = node
        nodes.append(node)
        return node

    for i, ph in enumerate(placeholders):
        val = ph.meta["val"]
        if i < len(names) and names[i] in attributes and not ph.users:
            continue  # a tensor attribute forward does not read: nothing to fetch (or move to the device) a call
        if i < len(names):
            node = Node(f"p{i}", "param", OpKind.PARAM, tuple(val.shape), _dtype(val, names[i]))
            node.attrs["qualname"] = names[i]
            node.attrs["buffer"] = i >= n_params
            node.attrs["attribute"] = names[i] in attributes
            params.append(node)
        else:
            node = Node(f"in{len(inputs)}", "input", OpKind.INPUT, tuple(val.shape), _dtype(val, "input"))
            inputs.append(node)
        nodes.append(node)
        env[ph] = node
    outputs: list[Node] = []
    for fx in gm.graph.nodes:
        if fx.op == "placeholder":
            continue
        if fx.op == "output":
            outputs = [env[o] for o in fx.args[0]]
            continue
        target = fx.target
        if target is operator.getitem:
            source, index = fx.args
            if source.target in _VALUES_OF and index == 0:
                env[fx] = env[source]  # the pooled values; only the indices are beyond the author
                continue
            raise Unsupported(f"{_qualified(source.target)[1]} indices")
        op, qualified = _qualified(target)
        val = fx.meta.get("val")
        if target in _VALUES_OF:
            val = val[0]
        if not isinstance(val, torch.Tensor):
            raise Unsupported(qualified)
        shape, dtype = tuple(val.shape), _dtype(val, qualified)

        # Lists (dims, sizes) are read from fx.args by the converters; tensors and scalars are the operands.
        args = tuple(env[a] if isinstance(a, torch.fx.Node) else a for a in fx.args if isinstance(a, _OPERAND))
        name = f"v{len(nodes)}"
        if target is aten.as_strided.default and _strided_as_reshape(fx):
            env[fx] = add(Node(name, "reshape", OpKind.VIEW, shape, dtype, args[:1]))
            continue
        resolved = _resolve(fx.args, env)
        env[fx] = add(_convert(name, op, qualified, fx.kwargs, resolved, args, shape, dtype, add))
    for o in outputs:
        if o.dtype not in ("float32", "float64", "bfloat16", "float16", "int64", "int32", "bool"):
            raise Unsupported(f"output of dtype {o.dtype}")
    return Graph(nodes, inputs, params, outputs, single, tensor_pos, arg_count)


def _strided_as_reshape(fx: torch.fx.Node) -> bool:
    """Whether an as_strided is a reshape (a decomposition's unsqueeze of a fresh result may be written as one): its
    source contiguous, and the sizes and strides it asks for a contiguous tensor's, over all of the source."""
    src = fx.args[0]
    size, stride = list(cast(Sequence[int], fx.args[1])), list(cast(Sequence[int], fx.args[2]))
    offset = fx.args[3] if len(fx.args) > 3 and fx.args[3] is not None else 0
    val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or not val.is_contiguous() or val.storage_offset() != offset:
        return False
    contiguous = [math.prod(size[k + 1 :]) for k in range(len(size))]
    return math.prod(size) == val.numel() and all(
        n == 1 or s == c for n, s, c in zip(size, stride, contiguous, strict=True)
    )


def _cse_key(node: Node) -> tuple[Any, ...]:
    """What makes ``node``'s value: equal keys compute equal tensors (every op the author captures is a function of
    its operands and attributes; inputs and parameters, values of their own, have none)."""
    args = tuple(a.name if isinstance(a, Node) else (type(a).__name__, repr(a)) for a in node.args)
    return (node.op, node.kind, node.shape, node.dtype, args, repr(sorted(node.attrs.items())))


def _positional(raw: tuple[Any, ...], start: int, defaults: list[Any]) -> list[Any]:
    """Positional arguments ``start``.. of an aten call, the schema's defaults where the trace left them out."""
    given = list(raw[start : start + len(defaults)])
    return given + defaults[len(given) :]


def _resolve(value: Any, env: dict[torch.fx.Node, Node]) -> Any:
    """An fx argument with every fx node (also inside lists: cat, index) replaced by its IR node."""
    if isinstance(value, torch.fx.Node):
        return env[value]
    if isinstance(value, list | tuple):
        return type(value)(_resolve(v, env) for v in value)
    return value


def _qualified(target: Any) -> tuple[str, str]:
    """(op name as ir.py keys it, e.g. ``sum``; qualified name for messages, e.g. ``aten.sum``)."""
    packet = getattr(target, "overloadpacket", None)
    op = getattr(packet, "__name__", str(target))
    return op, str(getattr(packet, "_qualified_op_name", op)).replace("::", ".")


def _convert(
    name: str,
    op: str,
    qualified: str,
    kw: Any,
    raw: tuple[Any, ...],
    args: tuple[Any, ...],
    shape: tuple[int, ...],
    dtype: str,
    add: Callable[[Node], Node],
) -> Node:
    if op in ("add", "sub") and kw.get("alpha", 1) != 1:
        scaled = add(Node(f"{name}a", "mul", OpKind.POINTWISE, args[1].shape if isinstance(args[1], Node) else (),
                          dtype, (args[1], kw["alpha"])))  # fmt: skip
        return Node(name, op, OpKind.POINTWISE, shape, dtype, (args[0], scaled))
    if op == "div" and kw.get("rounding_mode") is not None:
        # Rounded afterwards: the quotient must be the true one (a reciprocal's product can land under an integer),
        # and an integer one is rounded here (C's truncates; floor of it would be too late).
        rounded = {"rounded": kw["rounding_mode"]}
        quotient = add(Node(f"{name}q", "div", OpKind.POINTWISE, shape, dtype, args, rounded))
        return Node(name, "trunc" if kw["rounding_mode"] == "trunc" else "floor", OpKind.POINTWISE, shape, dtype,
                    (quotient,))  # fmt: skip
    if op == "bitwise_not" and dtype == "bool":  # C's ~ of a bool is an int that is never 0
        op = "logical_not"
    if op in UNARY and len(args) == 1:
        return Node(name, op, OpKind.POINTWISE, shape, dtype, args)
    if op in BINARY and not kw:
        return Node(name, op, OpKind.POINTWISE, shape, dtype, args)
    if op in _CASTS:
        return Node(name, "cast", OpKind.POINTWISE, shape, dtype, args[:1])
    if op == "copy" and len(args) >= 2:  # functional copy_: the source, broadcast to the destination's shape and dtype
        return Node(name, "cast", OpKind.POINTWISE, shape, dtype, args[1:2])
    if op in ("clamp", "clamp_min", "clamp_max", "hardtanh"):
        if op == "clamp":
            lo, hi = _positional(raw, 1, [None, None])
        elif op == "hardtanh":
            lo, hi = _positional(raw, 1, [-1.0, 1.0])
        else:
            lo, hi = (raw[1], None) if op == "clamp_min" else (None, raw[1])
        lo, hi = kw.get("min", lo), kw.get("max", hi)
        if isinstance(lo, Node) or isinstance(hi, Node):
            # Tensor bounds (a broadcast one, as cosine_similarity's clamped norms): the maximum with the lower
            # bound, then the minimum with the upper one, as torch.clamp defines it.
            if hi is None:
                return _bounded(name, "maximum", args[0], lo, shape, dtype)
            low = args[0] if lo is None else add(_bounded(f"{name}lo", "maximum", args[0], lo, shape, dtype))
            return _bounded(name, "minimum", low, hi, shape, dtype)
        return Node(name, "clamp", OpKind.POINTWISE, shape, dtype, args[:1], {"min": lo, "max": hi})
    if op == "gelu":
        return Node(
            name, "gelu", OpKind.POINTWISE, shape, dtype, args[:1], {"approximate": kw.get("approximate", "none")}
        )
    if op == "leaky_relu":
        return Node(name, op, OpKind.POINTWISE, shape, dtype, args[:1], {"slope": raw[1] if len(raw) > 1 else 0.01})
    if op == "elu":
        a = _positional(raw, 1, [1.0, 1.0, 1.0])
        return Node(
            name, op, OpKind.POINTWISE, shape, dtype, args[:1], {"alpha": a[0], "scale": a[1], "input_scale": a[2]}
        )
    if op == "softplus":
        b = _positional(raw, 1, [1.0, 20.0])
        return Node(name, op, OpKind.POINTWISE, shape, dtype, args[:1], {"beta": b[0], "threshold": b[1]})
    if op == "threshold":
        return Node(name, op, OpKind.POINTWISE, shape, dtype, args[:1], {"threshold": raw[1], "value": raw[2]})
    if op == "lerp" and isinstance(raw[2], int | float):
        return Node(name, op, OpKind.POINTWISE, shape, dtype, args[:2], {"weight": raw[2]})
    if op in _CONSTS:
        # An empty tensor's contents are undefined until written (functionalized code fills it by slice_scatter):
        # zeros are as good as any.
        value = 0 if op.startswith("empty") else {"zeros": 0, "ones": 1, "zeros_like": 0, "ones_like": 1}.get(op)
        if value is None:
            value = raw[0] if op == "scalar_tensor" else raw[1]
        if not isinstance(value, bool | int | float):
            raise Unsupported(f"{qualified} with a non-constant fill")
        return Node(name, "const", OpKind.CONST, shape, dtype, (), {"value": value})
    if op == "view" and len(raw) > 1 and isinstance(raw[1], torch.dtype):  # a bitcast: the same bits, another type
        if (args[0].dtype, dtype) != ("float32", "int32"):
            raise Unsupported(f"{qualified} from {args[0].dtype} to {dtype}")
        return Node(name, "float_bits", OpKind.POINTWISE, shape, dtype, args[:1])
    if op in _VIEWS:
        return _view(name, op, raw, args, shape, dtype)
    if op in ("max", "min") and len(raw) >= 2 and isinstance(raw[1], int):
        op = "a" + op  # max.dim's values: amax over the dim
    if op in ("any", "all"):
        if not isinstance(args[0], Node) or args[0].dtype != "bool":
            raise Unsupported(f"{qualified} of a tensor that is not bool")
        op = "amax" if op == "any" else "amin"  # of truth values: ir.reduction's || and &&
    if op in REDUCTIONS and isinstance(args[0], Node):
        src: Node = args[0]
        dims_arg = raw[1] if len(raw) > 1 else kw.get("dim")
        keepdim = bool(raw[2] if len(raw) > 2 else kw.get("keepdim", False))
        if kw.get("dtype") is not None and str(kw["dtype"]).removeprefix("torch.") != src.dtype:
            raise Unsupported(f"{qualified} with an accumulation dtype")
        if dims_arg is None or (isinstance(dims_arg, list | tuple) and len(dims_arg) == 0):
            dims = list(range(len(src.shape)))
        else:
            dims = [dims_arg] if isinstance(dims_arg, int) else list(dims_arg)
        ndim = max(len(src.shape), 1)
        dims = sorted({d % ndim for d in dims})
        if not keepdim:
            return Node(name, op, OpKind.REDUCTION, shape, dtype, (src,), {"dims": tuple(dims)})
        # keepdim is a view of the reduction: x.mean(0) and x.mean(0, keepdim=True) are then one reduction.
        kept = tuple(n for j, n in enumerate(src.shape) if j not in dims)
        red = add(Node(f"{name}r", op, OpKind.REDUCTION, kept, dtype, (src,), {"dims": tuple(dims)}))
        return Node(name, "reshape", OpKind.VIEW, shape, dtype, (red,))
    if op in ("mm", "bmm") and all(isinstance(a, Node) for a in args):
        return Node(name, op, OpKind.CONTRACTION, shape, dtype, args)
    if op == "convolution" and isinstance(args[0], Node):
        return _convolution(name, raw, shape, dtype, add)
    scans = {"cumsum": "sum", "cumprod": "prod", "cummax": "amax", "cummin": "amin", "logcumsumexp": "logaddexp"}
    if op in scans and len(args) >= 1 and not kw.get("dtype"):
        dim = raw[1] % max(len(shape), 1)
        return Node(name, scans[op], OpKind.SCAN, shape, dtype, args[:1], {"dim": dim})
    if qualified == "cuda_agent.recurrence":
        gates, h0, c0, w_hh, b_hh, mode = raw
        operands = tuple(x for x in (gates, h0, c0, w_hh, b_hh) if x is not None)
        attrs = {"mode": mode, "cell": c0 is not None, "bias": b_hh is not None}
        return Node(name, "recurrence", OpKind.RECURRENCE, shape, dtype, operands, attrs)
    return _index_or_window(name, op, qualified, raw, args, kw, shape, dtype)


def _bounded(name: str, op: str, x: Node, bound: Node | float, shape: tuple[int, ...], dtype: str) -> Node:
    """``x`` clamped on one side by a tensor or a number: ``op`` "maximum" for a lower bound, "minimum" an upper."""
    if isinstance(bound, Node):
        return Node(name, op, OpKind.POINTWISE, shape, dtype, (x, bound))
    side = {"min": bound, "max": None} if op == "maximum" else {"min": None, "max": bound}
    return Node(name, "clamp", OpKind.POINTWISE, shape, dtype, (x,), side)


def _convolution(
    name: str, raw: tuple[Any, ...], shape: tuple[int, ...], dtype: str, add: Callable[[Node], Node]
) -> Node:
    """aten.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups). The bias
    becomes a broadcast add, so it fuses into whatever elementwise epilogue follows instead of costing a pass."""
    x, weight, bias, stride, padding, dilation, transposed, _, groups = raw[:9]
    spatial = len(shape) - 2

    def per_dim(values: Sequence[int]) -> tuple[int, ...]:
        return tuple(values) * (spatial // len(values)) if len(values) == 1 else tuple(values)

    attrs = {
        "stride": per_dim(stride),
        "pad": per_dim(padding),
        "dilation": per_dim(dilation),
        "transposed": bool(transposed),
        "groups": int(groups),
    }
    conv = Node(name if bias is None else f"{name}c", "conv", OpKind.CONVOLUTION, shape, dtype, (x, weight), attrs)
    if bias is None:
        return conv
    add(conv)
    per_channel = add(Node(f"{name}b", "broadcast_in_dim", OpKind.VIEW, shape, dtype, (bias,), {"dims": (1,)}))
    return Node(name, "add", OpKind.POINTWISE, shape, dtype, (conv, per_channel))


def _index_or_window(
    name: str,
    op: str,
    qualified: str,
    raw: tuple[Any, ...],
    args: tuple[Any, ...],
    kw: Any,
    shape: tuple[int, ...],
    dtype: str,
) -> Node:
    if op == "arange" and isinstance(raw[0], int | float):
        start, step = (raw[0], raw[2] if len(raw) > 2 else 1) if len(raw) > 1 else (0, 1)
        return Node(name, "iota", OpKind.INDEX, shape, dtype, (), {"start": start, "step": step})
    if op == "embedding":
        return Node(name, "embedding", OpKind.INDEX, shape, dtype, args[:2])
    if op in ("index_select", "gather"):
        return Node(name, op, OpKind.INDEX, shape, dtype, (args[0], args[-1]), {"dim": raw[1] % len(args[0].shape)})
    if op == "index" and isinstance(raw[1], list | tuple):
        # Advanced indexing by adjacent index tensors (None keeps a dim): the output holds the dims before them,
        # the index tensors' broadcast shape, then the dims after them.
        held = [d for d, i in enumerate(raw[1]) if i is not None]
        if not held or held != list(range(held[0], held[-1] + 1)) or not all(isinstance(raw[1][d], Node) for d in held):
            raise Unsupported(f"{qualified} with index tensors that are not adjacent")
        indices = tuple(raw[1][d] for d in held)
        return Node(name, "index", OpKind.INDEX, shape, dtype, (args[0], *indices), {"first": held[0]})
    if op == "slice_scatter" and isinstance(args[0], Node) and isinstance(args[1], Node):
        dst, src = args[0], args[1]
        dim, start, _, step = _positional(raw, 2, [0, None, None, 1])
        dim %= len(shape)
        start = 0 if start is None else start + shape[dim] if start < 0 else start
        return Node(name, op, OpKind.INDEX, shape, dtype, (dst, src), {"dim": dim, "start": start, "step": step})
    if op == "constant_pad_nd" and isinstance(args[0], Node):
        pads, value = list(raw[1]), raw[2] if len(raw) > 2 else 0
        rank = len(shape)
        before = [0] * rank
        for k in range(len(pads) // 2):  # (left, right) pairs from the last dim backwards
            before[rank - 1 - k] = pads[2 * k]
        return Node(name, "pad", OpKind.INDEX, shape, dtype, args[:1], {"before": tuple(before), "value": value})
    if op == "cat":
        sources = list(raw[0])
        dim = (raw[1] if len(raw) > 1 else 0) % len(shape)
        sources = [s for s in sources if s.shape[dim] > 0]
        return Node(name, "cat", OpKind.INDEX, shape, dtype, tuple(sources), {"dim": dim})
    if op in _POOLS and isinstance(args[0], Node):
        return _pool(name, op, qualified, raw, args[0], shape, dtype)
    raise Unsupported(qualified)


# Pooling ops -> (spatial dims, reduction, adaptive). 1-d pools reach aten as 2-d ones over a height of 1.
_POOLS: dict[str, tuple[int, str, bool]] = {
    "avg_pool2d": (2, "sum", False),
    "avg_pool3d": (3, "sum", False),
    "max_pool2d_with_indices": (2, "amax", False),
    "max_pool3d_with_indices": (3, "amax", False),
    "_adaptive_avg_pool2d": (2, "sum", True),
    "_adaptive_avg_pool3d": (3, "sum", True),
    "adaptive_max_pool2d": (2, "amax", True),
    "adaptive_max_pool3d": (3, "amax", True),
}


def _pool(
    name: str, op: str, qualified: str, raw: tuple[Any, ...], src: Node, shape: tuple[int, ...], dtype: str
) -> Node:
    """A window reduction over the last 2 or 3 dims. Ceil mode needs nothing of its own: the output's shape is
    known, and taps past the input are skipped like padding."""
    spatial, reduce, adaptive = _POOLS[op]
    attrs: dict[str, Any] = {
        "spatial": spatial,
        "reduce": reduce,
        "adaptive": adaptive,
        "divisor": None,
        "count_pad": True,
    }
    if not adaptive:

        def per_dim(value: Any, default: list[int]) -> tuple[int, ...]:
            values = list(value) if isinstance(value, list | tuple) and value else default
            values = [values] if isinstance(values, int) else values
            return tuple(values * (spatial // len(values)) if len(values) == 1 else values)

        kernel = per_dim(raw[1], [1])
        stride = per_dim(raw[2] if len(raw) > 2 else [], list(kernel))
        pad = per_dim(raw[3] if len(raw) > 3 else [0], [0])
        attrs.update(kernel=kernel, stride=stride, pad=pad, dilation=(1,) * spatial)
        if reduce == "amax":
            attrs["dilation"] = per_dim(raw[4] if len(raw) > 4 else [1], [1])
        else:
            _, attrs["count_pad"], attrs["divisor"] = _positional(raw, 4, [False, True, None])
    return Node(name, "pool", OpKind.WINDOW, shape, dtype, (src,), attrs)


def _view(name: str, op: str, raw: tuple[Any, ...], args: tuple[Any, ...], shape: tuple[int, ...], dtype: str) -> Node:
    src: Node = args[0]
    rank = len(src.shape)
    attrs: dict[str, Any] = {}
    if op in ("view", "_unsafe_view", "reshape", "squeeze", "unsqueeze"):
        op = "reshape"
    elif op == "expand":
        op = "broadcast"
    elif op == "broadcast_in_dim":
        attrs["dims"] = tuple(raw[2])
        op = "broadcast_in_dim"
    elif op in ("permute", "t", "transpose"):
        if op == "permute":
            perm = [d % max(rank, 1) for d in raw[1]]
        else:
            perm = list(range(rank))
            a, b = (0, 1) if op == "t" else (raw[1] % rank, raw[2] % rank)
            if rank >= 2:
                perm[a], perm[b] = perm[b], perm[a]
        attrs["perm"] = tuple(perm)
        op = "permute"
    elif op == "slice":
        dim = (raw[1] if len(raw) > 1 else 0) % rank
        start = raw[2] if len(raw) > 2 and raw[2] is not None else 0
        step = raw[4] if len(raw) > 4 else 1
        start = start + src.shape[dim] if start < 0 else min(start, src.shape[dim])
        attrs.update(dim=dim, start=start, step=step)
    elif op == "flip":
        attrs["dims"] = tuple(d % rank for d in raw[1])
    elif op == "select":
        dim = raw[1] % rank
        index = raw[2] + src.shape[dim] if raw[2] < 0 else raw[2]
        attrs.update(dim=dim, index=index)
    if op in ("slice", "select"):
        return _unscattered(Node(name, op, OpKind.VIEW, shape, dtype, (src,), attrs))
    return Node(name, op, OpKind.VIEW, shape, dtype, (src,), attrs)


def _unscattered(view: Node) -> Node:
    """A slice or select of a slice_scatter read from the side it reads: wholly inside the scattered range, from the
    scattered source; wholly outside it, from the destination (and on down a chain of them). Functionalized
    in-place updates of a tensor's pieces (an LSTM cell's sigmoid_ and tanh_ on its gates' chunks) are such chains,
    and every piece read back through them would otherwise carry a ternary per link, each branch inlining the link
    before it: expressions doubling a link."""
    dim = view.attrs["dim"]
    first = view.attrs["start"] if view.op == "slice" else view.attrs["index"]
    step = view.attrs["step"] if view.op == "slice" else 1
    last = first + step * ((view.shape[dim] if view.op == "slice" else 1) - 1)
    scatter = view.args[0]
    while scatter.op == "slice_scatter" and scatter.attrs["dim"] == dim and scatter.attrs["step"] == 1:
        dst, src = scatter.args
        start, end = scatter.attrs["start"], scatter.attrs["start"] + src.shape[dim]
        if start <= first and last < end:  # inside: the source, from its own first element on
            attrs = {**view.attrs, "start" if view.op == "slice" else "index": first - start}
            if view.op == "slice" and first == start and step == 1 and view.shape == src.shape:
                return src
            return Node(view.name, view.op, OpKind.VIEW, view.shape, view.dtype, (src,), attrs)
        if not (last < start or first >= end):  # partly inside: both sides are read
            break
        scatter = dst
    if scatter is view.args[0]:
        return view
    return Node(view.name, view.op, OpKind.VIEW, view.shape, view.dtype, (scatter,), view.attrs)
