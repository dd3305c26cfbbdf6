"""Capture and plan on small modules: what gets fused into one kernel, what stays apart, what is refused."""

from __future__ import annotations

import re
import sys

import pytest
import torch
import torch.nn.functional as F

from cuda_agent.author import OpKind, Unsupported, capture_problem, emit, plan_graph
from cuda_agent.author.capture import _pdist
from cuda_agent.author.emit import Variant, emit_source, variant_plan
from cuda_agent.author.plan import (
    CAT_PIECES,
    ConvKernel,
    GemmKernel,
    RecurrenceKernel,
    RowKernel,
    fuse_epilogues,
    linear_index,
    reshape_coords,
)
from tests.author import problems


def _kernels(source: str) -> list[RowKernel | GemmKernel]:
    return plan_graph(capture_problem(source)).kernels


def test_capture_is_on_meta_and_names_parameters() -> None:
    graph = capture_problem(problems.LINEAR_RELU)
    assert [p.attrs["qualname"] for p in graph.params] == ["fc.weight", "fc.bias"]
    assert [n.shape for n in graph.inputs] == [(24, 48)] and graph.single_output
    assert any(n.kind is OpKind.CONTRACTION and n.op == "mm" for n in graph.nodes)


def test_inputs_drawn_from_a_distribution_are_captured_on_meta() -> None:
    """A distribution's argument checks branch on values, which meta tensors lack: they are off while the problem is
    sized there, and on again after."""
    source = problems.problem(
        "        pass",
        "        return torch.mean((p - t) ** 2)",
        "[torch.distributions.Pareto(0.01, 1.5).sample((64, 32)) for _ in range(2)]",
        args="p, t",
    )
    graph = capture_problem(source)
    assert [tuple(n.shape) for n in graph.inputs] == [(64, 32), (64, 32)]
    assert torch.distributions.Distribution._validate_args
    with pytest.raises(ValueError):
        torch.distributions.Pareto(-1.0, 1.5)


def test_problems_written_for_a_gpu_are_captured_on_meta_on_any_machine() -> None:
    source = problems.problem(
        '        self.scale = torch.full((32,), 0.5).to("cuda")\n        self.fc = nn.Linear(32, 16).cuda()',
        "        return self.fc(x * self.scale)",
        '[torch.randn(8, 32, device="cuda", dtype=torch.float16).cuda().to("cuda", torch.float32)]',
    )
    graph = capture_problem(source)
    assert [(tuple(n.shape), n.dtype) for n in graph.inputs] == [((8, 32), "float32")]
    assert {p.attrs["qualname"] for p in graph.params} == {"scale", "fc.weight", "fc.bias"}


def test_a_constructor_reading_values_builds_on_the_cpu_and_is_captured_on_meta() -> None:
    """A drop-path schedule's ``.item()`` in ``__init__``: meta tensors hold no values."""
    source = problems.problem(
        "        self.rates = [r.item() for r in torch.linspace(0, 0.5, 3)]\n        self.fc = nn.Linear(8, 8)",
        "        return self.fc(x) * self.rates[1]",
        "[torch.randn(4, 8)]",
    )
    graph = capture_problem(source)
    assert {p.attrs["qualname"] for p in graph.params} == {"fc.weight", "fc.bias"}
    assert any(n.op == "mul" and 0.25 in n.args for n in graph.nodes)


def test_a_deep_model_plans_past_pythons_default_recursion_limit() -> None:
    """Six transformer layers: kernels planned while others are (a product's operands, a norm's statistics) nest
    their expressions' recursion past 1000 frames."""
    source = problems.problem(
        "        self.layers = nn.ModuleList([nn.TransformerEncoderLayer(16, 2, 32, 0.0, batch_first=True)"
        " for _ in range(6)])",
        "        for layer in self.layers:\n            x = layer(x)\n        return x",
        "[torch.randn(2, 3, 16)]",
    )
    limit = sys.getrecursionlimit()
    assert limit < 5000 and len(plan_graph(capture_problem(source)).kernels) > 60
    assert sys.getrecursionlimit() == limit


def test_multi_statement_chain_is_one_elementwise_kernel() -> None:
    (kernel,) = _kernels(problems.GELU_RESIDUAL)
    assert isinstance(kernel, RowKernel) and kernel.reduced == () and kernel.outer == 64 * 300
    assert set(kernel.reads) == {"in0", "in1"} and set(kernel.writes) == {"out0"}


@pytest.mark.parametrize("source", [problems.SOFTMAX, problems.LAYERNORM, problems.RMSNORM])
def test_row_normalizations_fuse_into_one_kernel(source: str) -> None:
    (kernel,) = _kernels(source)
    assert isinstance(kernel, RowKernel) and kernel.reduced == (len(kernel.shape) - 1,)
    assert len(kernel.reductions) >= 1 and kernel.full_outputs


def test_softmax_reduces_max_then_sum() -> None:
    (kernel,) = _kernels(problems.SOFTMAX)
    assert [r.node.op for r in kernel.reductions] == ["amax", "sum"]


def test_reduction_over_a_middle_dim_then_broadcast() -> None:
    (kernel,) = _kernels(problems.SUM_SUBTRACT)
    assert kernel.reduced == (1,) and kernel.outer == 16 * 24 and kernel.inner == 40


def test_linear_reads_the_transposed_weight_through_strides() -> None:
    gemm, epilogue = _kernels(problems.LINEAR_RELU)
    assert isinstance(gemm, GemmKernel) and (gemm.m, gemm.n, gemm.k) == (24, 40, 48)
    assert gemm.b.buffer == "p0" and gemm.b.strides == [1, 48]  # fc.weight (40, 48) read as (48, 40)
    assert isinstance(epilogue, RowKernel) and set(epilogue.reads) == {gemm.out, "p1"}


@pytest.mark.parametrize("forward", ["return torch.diag(d) @ x", "return x.t() @ torch.diag(d)"])
def test_product_with_a_diagonal_matrix_is_a_scaling(forward: str) -> None:
    source = problems.problem("        pass", f"        {forward}", "[torch.randn(6), torch.randn(6, 6)]", args="d, x")
    (kernel,) = _kernels(source)
    assert isinstance(kernel, RowKernel) and kernel.reduced == ()  # one elementwise pass, no GEMM


def test_reductions_of_another_row_structure_are_staged_once() -> None:
    source = problems.problem(
        "        pass",
        "        y = torch.softmax(x, dim=-1)\n        return y - y.sum(dim=0)",
        "[torch.randn(8, 16)]",
    )
    kernels = _kernels(source)
    # softmax rows written once, then the column sums fused with the subtraction reading them.
    assert [k.reduced for k in kernels] == [(1,), (0,)]


def test_a_gathered_log_softmax_reads_its_rows_in_one_kernel() -> None:
    """Cross-entropy gathers one log-probability a row: the gather reads the rows' max first, then their sum of
    exponentials, each a reduction another kernel writes. One kernel computes both (the max as the sum's earlier
    pass) and writes both, instead of a kernel each reading the logits."""
    source = problems.problem(
        "        pass",
        "        return F.cross_entropy(x, t)",
        "[torch.randn(8, 40), torch.randint(0, 40, (8,))]",
        args="x, t",
    )
    over_logits = [k for k in _kernels(source) if isinstance(k, RowKernel) and k.shape == (8, 40)]
    assert len(over_logits) == 1
    assert [r.node.op for r in over_logits[0].reductions] == ["amax", "sum"] and len(over_logits[0].writes) == 2


def test_unsupported_op_is_named() -> None:
    with pytest.raises(Unsupported, match=r"aten\.sort"):
        capture_problem(problems.SORT)


def test_reduction_of_a_broadcast_is_folded() -> None:
    source = problems.problem(
        "        pass", "        return x.unsqueeze(1).expand(4, 9, 6).sum(1)", "[torch.randn(4, 6)]"
    )
    (kernel,) = _kernels(source)
    assert [r.invariant for r in kernel.reductions] == [True]


def test_reshape_coords_keep_untouched_dims() -> None:
    assert reshape_coords((4, 6), (4, 1, 6), ("a", "0", "b")) == ("a", "b")
    merged = reshape_coords((2, 3), (6,), ("k",))
    assert merged == ("((k) / 3LL)", "(k % 3LL)")
    for k in range(6):  # the expressions really index the same element
        i, j = (eval(e.replace("LL", "").replace("/", "//").replace("k", str(k))) for e in merged)
        assert torch.arange(6).view(2, 3)[i, j].item() == k


def _offset(expr: str, values: dict[str, int]) -> int:
    """A C index expression of non-negative integers, evaluated (C's division of these is Python's floor one)."""
    return int(eval(expr.replace("LL", "").replace("/", "//"), {}, values))


def test_a_reshape_and_its_inverse_index_by_the_flat_index() -> None:
    shape, grouped = (4, 6, 5, 7), (4, 2, 3, 35)  # channels split into 2 groups of 3, the spatial dims merged
    own = ("i0", "i1", "i2", "i3")
    back = reshape_coords(shape, grouped, reshape_coords(grouped, shape, own))
    assert linear_index(shape, back) == linear_index(shape, own) == "i0 * 210LL + i1 * 35LL + i2 * 7LL + i3"
    # Transposed between the two reshapes, the digits are no longer in order: nothing folds, and every element
    # is still found where it is.
    # out = x.view(2, 3, 5).permute(1, 0, 2).reshape(6, 5): out[a, b] is x at these coordinates
    permuted = reshape_coords((3, 2, 5), (6, 5), ("a", "b"))
    at_x = reshape_coords((6, 5), (2, 3, 5), (permuted[1], permuted[0], permuted[2]))
    index = linear_index((6, 5), at_x)
    reference = torch.arange(30).view(6, 5).view(2, 3, 5).permute(1, 0, 2).reshape(6, 5)
    for a in range(6):
        for b in range(5):
            assert _offset(index, {"a": a, "b": b}) == reference[a, b].item(), index


GROUP_NORM = problems.problem(
    "        self.gn = nn.GroupNorm(4, 16)", "        return self.gn(x)", "[torch.randn(2, 16, 5, 8)]"
)


def test_a_group_norm_is_one_kernel_over_its_groups_reading_its_input_at_its_own_index() -> None:
    """The output (channels, as the input's) is computed by the kernel over the groups' rows, where the groups'
    statistics are (Planner._rows_shape): the output's reshape back into channels indexes by the kernel's own
    coordinates, and each channel's weight by the group's and the channel's within it. Both passes read the input
    at their own index (16 bytes at a time)."""
    (kernel,) = _kernels(GROUP_NORM)
    assert isinstance(kernel, RowKernel) and kernel.shape == (2, 4, 4, 40) and kernel.reduced == (2, 3)
    assert "in0" in kernel.out_scope.identity_loads
    assert all("in0" in r.scope.identity_loads for r in kernel.reductions)
    assert "p0[i1 * 4LL + i2]" in " ".join(kernel.out_scope.stmts)


def test_arithmetic_on_row_statistics_is_done_once_a_row() -> None:
    """The mean and the reciprocal standard deviation of a GroupNorm's groups, computed from its sums in double,
    read no element: the output pass hoists them out of its loop, its per-element work a subtraction and three
    products."""
    (kernel,) = _kernels(GROUP_NORM)
    assert isinstance(kernel, RowKernel)
    lines = emit._loop("for (int64_t r = 0; r < 160LL; r += 1)", kernel.out_scope.stmts)
    loop = "\n".join(lines[next(i for i, line in enumerate(lines) if line.startswith("for ")) :])
    assert "sqrt" in "\n".join(lines) and "sqrt" not in loop and "double" not in loop


def test_a_row_read_in_several_passes_is_cached_where_it_fits() -> None:
    """Softmax passes over its 513-wide rows three times (max, sum, output): the input is the cached buffer. In
    registers at 256 threads a row (three items a thread) and at a warp's 32 (17), not at 16 (33 items, past the
    register budget); in shared memory (2 KB) at any block size. Statistics that share a pass (the layer norm's sum
    and sum of squares) read the row once: the output pass makes it twice."""
    from cuda_agent.author.emit import ROW_CACHE_VALUES, row_cache

    (kernel,) = _kernels(problems.SOFTMAX)
    assert kernel.inner == 513
    assert row_cache(kernel, 256) == frozenset({"in0"}) == row_cache(kernel, 256, threads=32)
    assert row_cache(kernel, 32, "smem") == frozenset({"in0"})
    assert ROW_CACHE_VALUES < -(-513 // 16) and row_cache(kernel, 16) == frozenset()
    (long_rows,) = _kernels(problems.LONG_ROWS)  # 40,000 wide: 40 items a thread even at 1024 threads
    assert row_cache(long_rows, 1024) == frozenset() and row_cache(long_rows, 1024, "smem") == frozenset({"in0"})
    (elementwise,) = _kernels(problems.GELU_RESIDUAL)  # one pass: nothing read twice
    assert row_cache(elementwise, 256) == frozenset() == row_cache(elementwise, 256, "smem")


def test_a_value_computed_twice_is_one_node() -> None:
    """x.mean(0) twice, once with keepdim (a view of it), is one reduction."""
    source = problems.problem(
        "        pass", "        return (x - x.mean(dim=0, keepdim=True)) * x.mean(dim=0)", "[torch.randn(300, 70)]"
    )
    sums = [n for n in capture_problem(source).nodes if n.kind is OpKind.REDUCTION]
    assert [n.attrs["dims"] for n in sums] == [(0,)]


def test_independent_statistics_share_a_pass() -> None:
    """x.mean(0), and the sum and sum of squares x.std(0) accumulates in double: three reductions that read none of
    one another's results, so one pass over the columns; softmax's sum reads its max: two passes."""
    from cuda_agent.author.emit import _passes

    (kernel,) = _kernels(problems.STANDARDIZE_COLUMNS)
    assert isinstance(kernel, RowKernel)
    assert sorted(r.node.ctype for r in kernel.reductions) == ["double", "double", "float"]
    assert [len(group) for group in _passes(kernel.reductions)] == [3]
    (softmax,) = _kernels(problems.SOFTMAX)
    assert isinstance(softmax, RowKernel) and [len(group) for group in _passes(softmax.reductions)] == [1, 1]


def test_a_keepdim_output_is_written_by_its_reduction() -> None:
    source = problems.problem("        pass", "        return x.amin(dim=2, keepdim=True)", "[torch.randn(4, 5, 33)]")
    (kernel,) = _kernels(source)
    assert isinstance(kernel, RowKernel) and kernel.reduced == (2,) and kernel.reduced_outputs


@pytest.mark.parametrize(
    ("forward", "inputs"),
    [
        ("x.flip(-1).cumsum(-1).flip(-1)", "[torch.randn(6, 40)]"),
        ("torch.cumsum(x, dim=1).transpose(0, 1).reshape(-1, 6)", "[torch.randn(6, 30)]"),
    ],
)
def test_a_scan_stores_its_permuted_output_itself(forward: str, inputs: str) -> None:
    (kernel,) = _kernels(problems.problem("        pass", f"        return {forward}", inputs))
    assert isinstance(kernel, RowKernel) and kernel.scan is not None and set(kernel.writes) == {"out0"}
    assert kernel.store_at is not None


def test_a_scan_read_elsewhere_too_is_stored_as_is() -> None:
    source = problems.problem(
        "        pass", "        y = x.cumsum(-1)\n        return y.flip(-1) + y", "[torch.randn(6, 40)]"
    )
    scan, add = _kernels(source)
    assert isinstance(scan, RowKernel) and scan.scan is not None and scan.store_at is None
    assert isinstance(add, RowKernel) and add.scan is None


def test_a_product_over_a_flattened_batch_reads_and_writes_in_place() -> None:
    source = problems.problem(
        "        pass", "        return torch.matmul(x, w)", "[torch.randn(4, 16, 32), torch.randn(32, 8)]", args="x, w"
    )
    (gemm,) = _kernels(source)
    assert isinstance(gemm, GemmKernel) and gemm.a.buffer == "in0" and gemm.a.strides == [32, 1]
    assert gemm.out == "out0"


def test_an_operand_scaled_by_a_number_is_read_unscaled_and_the_product_scaled() -> None:
    source = problems.problem(
        "        pass",
        "        return F.scaled_dot_product_attention(q, k, v)",
        "[torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 8)]",
        args="q, k, v",
    )
    gemms = [k for k in _kernels(source) if isinstance(k, GemmKernel)]
    scores = gemms[0]
    assert (scores.a.buffer, scores.b.buffer) == ("in0", "in1") and scores.alpha == pytest.approx(8**-0.5)


def test_sources_too_large_to_build_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recurrence inlined step by step (an LSTM's gates) comes to tens of MB of source: refused up front."""
    from cuda_agent.author import emit
    from cuda_agent.author.search import author_problem

    assert not author_problem(problems.SOFTMAX, "cuda").unsupported
    monkeypatch.setattr(emit, "MAX_SOURCE_BYTES", 4096)
    refused = author_problem(problems.SOFTMAX, "cuda").unsupported
    assert refused.startswith("the emitted kernels come to") and "a build finishes in time" in refused


@pytest.mark.parametrize(
    ("layer", "call", "size", "nodes"),
    [
        # a public size: 6 layers over 512 steps, both ways (traced as its cells, it took minutes to be refused)
        ("nn.GRU(8, 16, 6, batch_first=True, bidirectional=True)", "self.rnn(x)[1]", "4, 512, 8", 6),
        ("nn.LSTM(8, 16, 3, bias=False)", "self.rnn(x)[1][1]", "700, 4, 8", 3),
        # unbatched: nn.RNN adds the batch dim around its call
        ("nn.RNN(8, 16, 2, nonlinearity='relu')", "self.rnn(x)[0]", "65, 8", 2),
    ],
)
def test_a_recurrent_layer_is_a_recurrence_a_layer(layer: str, call: str, size: str, nodes: int) -> None:
    """Each layer is its input's projection (a product over every step) and one recurrence node of both directions,
    whatever the steps: nothing is unrolled."""
    source = problems.problem(f"        self.rnn = {layer}", f"        return {call}", f"[torch.randn({size})]")
    graph = capture_problem(source)
    recurrences = [n for n in graph.nodes if n.kind is OpKind.RECURRENCE]
    assert len(recurrences) == nodes and len(graph.nodes) < 40 * nodes
    assert all(n.shape[-1] == 16 * (1 + ("bidirectional" in layer)) for n in recurrences)
    kinds = {type(k) for k in plan_graph(graph).kernels}
    assert RecurrenceKernel in kinds and GemmKernel in kinds


@pytest.mark.parametrize(
    ("layer", "refused"),
    [
        ("nn.LSTM(8, 16, proj_size=4)", "lstm with projections (proj_size)"),
        ("nn.GRU(8, 16, 2, dropout=0.5)", "gru: dropout between layers in training mode (random)"),
        ("nn.LSTM(8, 16).half()", "lstm in float16"),
    ],
)
def test_recurrent_layers_the_author_cannot_express_are_refused(layer: str, refused: str) -> None:
    dtype = "torch.float16" if ".half()" in layer else "torch.float32"
    source = problems.problem(
        f"        self.rnn = {layer}", "        return self.rnn(x)[0]", f"[torch.randn(5, 3, 8, dtype={dtype})]"
    )
    with pytest.raises(Unsupported, match=re.escape(refused)):
        plan_graph(capture_problem(source))


def test_rrelu_in_training_mode_is_refused() -> None:
    """A module's default mode is training, where RReLU draws its slopes at random: no kernel reproduces them."""
    source = problems.problem("        self.act = nn.RReLU()", "        return self.act(x)", "[torch.randn(4, 9)]")
    with pytest.raises(Unsupported, match="rrelu in training mode"):
        capture_problem(source)


@pytest.mark.parametrize("pool", ["nn.MaxPool1d(4, stride=2, padding=1)", "nn.AvgPool1d(8, stride=4)"])
def test_a_1d_pool_reads_its_input_under_the_unsqueeze(pool: str) -> None:
    """A 1-d pool is a 2-d one of the input unsqueezed: one kernel, reading the input itself (no copy first)."""
    source = problems.problem(f"        self.pool = {pool}", "        return self.pool(x)", "[torch.randn(2, 3, 40)]")
    (kernel,) = _kernels(source)
    assert set(kernel.reads) == {"in0"} and set(kernel.writes) == {"out0"}


def test_a_softmax_between_batched_products_is_one_kernel() -> None:
    """The softmax is reshaped into a batch of products: it is written in its own rows by one kernel (statistics
    and outputs), which the second product reads through the reshape, not staged statistics and then a copy."""
    source = problems.problem(
        "        pass",
        "        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v",
        "[torch.randn(2, 3, 16, 8), torch.randn(2, 3, 16, 8), torch.randn(2, 3, 16, 8)]",
        args="q, k, v",
    )
    first, softmax, second = _kernels(source)
    assert isinstance(first, GemmKernel) and isinstance(second, GemmKernel) and isinstance(softmax, RowKernel)
    assert [r.node.op for r in softmax.reductions] == ["amax", "sum"] and second.a.buffer in softmax.writes


def test_an_operand_computed_then_transposed_is_read_through_the_transpose() -> None:
    source = problems.problem(
        "        pass", "        return a @ (b * 2.0 + 1.0).t()", "[torch.randn(6, 8), torch.randn(5, 8)]", args="a, b"
    )
    rows, gemm = _kernels(source)
    assert isinstance(rows, RowKernel) and isinstance(gemm, GemmKernel)
    assert rows.shape == (5, 8) and gemm.b.buffer in rows.writes and list(gemm.b.strides) == [1, 8]


def test_a_convolution_of_a_reshaped_input_reads_the_input_itself() -> None:
    source = problems.problem(
        "        self.c = nn.Conv2d(3, 4, 3, bias=False)",
        "        return self.c(x.view(2, 3, 6, 5))",
        "[torch.randn(2, 90)]",
    )
    (conv,) = _kernels(source)
    assert conv.x == "in0" and conv.x_shape == (2, 3, 6, 5)


def _own(_: GemmKernel | ConvKernel) -> bool:
    return True


def test_the_elementwise_kernel_after_our_product_becomes_its_epilogue() -> None:
    plan = plan_graph(capture_problem(problems.LINEAR_RELU))
    gemm, epilogue = plan.kernels
    (fused,) = fuse_epilogues(plan, _own).kernels
    assert isinstance(fused, GemmKernel) and fused.epilogue is epilogue
    assert set(fused.reads) == {"in0", "p0", "p1"} and set(fused.writes) == set(epilogue.writes)
    assert gemm.out not in fuse_epilogues(plan, _own).buffers  # never allocated
    # A vendor library stores its product as it is: the elementwise kernel stays.
    assert fuse_epilogues(plan, lambda k: False).kernels == plan.kernels


@pytest.mark.parametrize(
    "forward",
    [
        "        y = x @ w\n        return y, torch.relu(y)",  # the product is an output as well
        "        return torch.relu(x @ w).t() + 1.0",  # the elementwise kernel is not over the product's shape
        "        y = x @ w\n        return y + y.t()",  # the product read at another element
        "        y = x @ w\n        return torch.relu(y), y.sum(dim=1)",  # another kernel reads the product
    ],
)
def test_no_epilogue_where_the_product_is_needed_elsewhere_or_otherwise(forward: str) -> None:
    source = problems.problem("        pass", forward, "[torch.randn(12, 12), torch.randn(12, 12)]", args="x, w")
    plan = plan_graph(capture_problem(source))
    assert not any(getattr(k, "epilogue", None) for k in fuse_epilogues(plan, _own).kernels)


def test_a_convolution_takes_its_bias_and_activation_as_an_epilogue() -> None:
    source = problems.problem(
        "        self.c = nn.Conv2d(3, 8, 3, padding=1)",
        "        return F.relu(self.c(x)) * 2.0",
        "[torch.randn(2, 3, 9, 9)]",
    )
    (conv,) = fuse_epilogues(plan_graph(capture_problem(source)), _own).kernels
    assert isinstance(conv, ConvKernel) and conv.epilogue is not None and list(conv.writes) == ["out0"]


def _recurrence(steps: int) -> str:
    return problems.problem(
        "        self.cell = nn.LSTMCell(8, 16)",
        "        h = c = torch.zeros(2, 16)\n        outs = []\n        for t in range(x.shape[1]):\n"
        "            h, c = self.cell(x[:, t], (h, c))\n            outs.append(h)\n"
        "        return torch.stack(outs, 1)",
        f"[torch.randn(2, {steps}, 8)]",
    )


def test_a_recurrence_reads_its_gates_straight_from_the_cells_updates() -> None:
    """An LSTM cell updates its gates' chunks in place (sigmoid_, tanh_): functionalized, a chain of slice_scatters.
    Each gate is read from the update that wrote it, not through a ternary per link whose branches each inline the
    link before (expressions doubling a link: megabytes of source for two steps)."""
    graph = capture_problem(_recurrence(8))
    assert not any(n.op in ("slice", "select") and n.args[0].op == "slice_scatter" for n in graph.nodes)
    source = emit_source(plan_graph(graph), "cuda", Variant())
    assert len(source) < 1_000_000


def test_a_state_every_step_reads_is_stored_once_its_expression_is_large() -> None:
    """15 steps of a state read by each step's output and by the next step: 45 producers deep (under FUSION_DEPTH)
    but over a hundred distinct nodes, which every output's kernel would compute again from the first step."""
    forward = (
        "        outs = []\n        for _ in range(15):\n"
        "            c = torch.sigmoid(c * 0.9 + x) + torch.tanh(c * 0.5 - x)\n"
        "            outs.append(c * 2)\n        return torch.stack(outs)"
    )
    kernels = _kernels(problems.problem("        pass", forward, "[torch.randn(4, 8), torch.randn(4, 8)]", args="x, c"))
    assert len(kernels) >= 2, "the state is stored where its expression passes plan.FUSION_NODES"


@pytest.mark.parametrize(("pieces", "stored"), [(CAT_PIECES + 1, True), (CAT_PIECES, False)])
def test_a_concatenation_of_many_pieces_read_twice_is_stored(pieces: int, stored: bool) -> None:
    """A dense block's input: every earlier layer's features concatenated, then normalized by statistics of its
    own. Past CAT_PIECES pieces the concatenation is a kernel's output, read by the statistics and by the
    normalization, instead of every piece read for each element in each of them; fewer pieces stay inlined."""
    forward = (
        f"        feats = [x + i for i in range({pieces})]\n        c = torch.cat(feats, 1)\n"
        "        return (c - c.mean(dim=1, keepdim=True)) * 2.0"
    )
    kernels = _kernels(problems.problem("        pass", forward, "[torch.randn(4, 3, 8)]"))
    assert any(k.name.endswith("_cat") for k in kernels) is stored, [k.name for k in kernels]


@pytest.mark.parametrize("dim", [1, -1])
def test_a_softmax_read_from_memory_takes_its_max_and_sum_in_one_pass(dim: int) -> None:
    """Rows read from memory each pass (no row cache): the max and the sum of exponentials in one loop over the row
    (an online softmax), then the outputs' loop; in two where the variant says so, or where a row cached in
    registers is read from memory once anyway."""
    source = problems.problem(
        "        pass", f"        return torch.log_softmax(x, dim={dim})", "[torch.randn(8, 96, 40)]"
    )
    plan = plan_graph(capture_problem(source))
    cached = Variant(rows="warp", cache="regs")
    for variant, loops, online in ((Variant(), 2, True), (Variant(softmax="passes"), 3, False), (cached, 3, False)):
        if dim == 1 and variant.cache != "none":
            continue
        text = emit_source(variant_plan(plan, "cuda", variant), "cuda", variant)
        passes = re.findall(r"for \((?:int64_t r0?|int g) = ", text)  # over a row's elements, or its groups of 4
        assert len(passes) == loops and ("MaxSumOp()" in text) == online


def test_pdist_pairs_come_from_their_index_in_order() -> None:
    """The decomposition finds pair k's rows i < j from k alone: every pair, in torch's order."""
    for n in (2, 3, 7, 64, 300, 3001):
        x = torch.randn(n, 1 if n > 300 else 3, dtype=torch.float64)
        torch.testing.assert_close(_pdist(x), F.pdist(x))


def test_a_running_extremes_indices_are_named_unsupported() -> None:
    source = problems.problem("        pass", "        return torch.cummax(x, dim=1).indices", "[torch.randn(4, 9)]")
    with pytest.raises(Unsupported, match="cummax indices"):
        capture_problem(source)
