"""The CUDA back end's row kernels, every variant the search would time, run on the host through the emulator
(tests/author/cuda_emulator.h: a thread per CUDA thread, real barriers, shuffles through the warp's lanes) and
compared with the reference: the layouts' index arithmetic, reductions, scans and caches are checked here, without a
GPU; the gpu-marked tests check the same on the H200."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from cuda_agent.author import capture_problem, emit, plan_graph
from cuda_agent.author.emit import Variant, variant_plan
from cuda_agent.author.plan import RecurrenceKernel, RowKernel
from cuda_agent.author.search import variants
from tests.author import problems
from tests.author.helpers import run_emulated_cuda

# Few rows (the emulator runs a thread per CUDA thread, and every barrier is a context switch), of the lengths that
# shape the layouts.
SOURCES = {
    # rows of 513: a block or a warp a row, the row in registers or shared memory
    "softmax": problems.problem("        pass", "        return torch.softmax(x, dim=-1)", "[torch.randn(6, 513)]"),
    # one-pass statistics in double, of values far from zero
    "layernorm": problems.problem(
        "        self.norm = nn.LayerNorm(96)", "        return self.norm(x)", "[100.0 + torch.randn(5, 96)]"
    ),
    # a middle dim reduced: 32 columns a tile, a block or a thread a row
    "sum_subtract": problems.problem(
        "        pass", "        s = x.sum(dim=1, keepdim=True)\n        return x - s / 7.0", "[torch.randn(2, 40, 24)]"
    ),
    # argmax / argmin as one reduction of packed 64-bit keys, over a middle dim (tiles) and the last (rows), of
    # values with many ties (the first index wins)
    "argmax_argmin": problems.problem(
        "        pass",
        "        return torch.argmax(x, dim=1), torch.argmin(x, dim=-1, keepdim=True)",
        "[torch.randint(-4, 4, (2, 40, 24)).float()]",
    ),
    # a max and a sum of exponentials in one pass where the rows are read from memory (an online softmax): over a
    # middle dim (tiles of columns), and over the last one behind a causal mask of -inf (a row's running max -inf
    # until its first unmasked value), its sum also returned
    "online_softmax": problems.problem(
        "        pass",
        "        m = torch.full((40, 40), float('-inf')).triu(1)\n"
        "        return torch.log_softmax(x, dim=1), torch.softmax(y + m, dim=-1), torch.logsumexp(y + m, dim=-1)",
        "[3.0 * torch.randn(2, 40, 24), 3.0 * torch.randn(3, 40, 40)]",
        args="x, y",
    ),
    # three statistics in one pass, 70 columns in 3 tiles (the last part empty)
    "standardize_columns": problems.problem(
        "        pass",
        "        return (x - x.mean(dim=0)) / (x.std(dim=0) + 1e-5)",
        "[3.0 + 2.0 * torch.randn(300, 70)]",
    ),
    # a scan after statistics in groups of 4 a thread, rows no chunk divides
    "softmax_cumsum": problems.problem(
        "        pass", "        return torch.softmax(x, dim=-1).cumsum(dim=-1)", "[torch.randn(5, 1000)]"
    ),
    # rows a multiple of every thread's items: the loops without bounds tests, a quotient by the row's sum a
    # product with its reciprocal
    "softmax_cumsum_exact_rows": problems.problem(
        "        pass", "        return torch.softmax(x, dim=-1).cumsum(dim=-1)", "[torch.randn(3, 2048)]"
    ),
    # rows of 1024 a multiple of every layout's groups of 4 (16-byte loads and stores, no bounds tests), a mask
    # broadcast along the heads
    "masked_softmax": problems.problem(
        "        pass",
        "        return torch.softmax(x * 0.125 + bias[:, None, :], dim=-1)",
        "[4.0 * torch.randn(2, 3, 1024), torch.randn(2, 1024)]",
        args="x, bias",
    ),
    # sigmoid, silu and a quotient by a value of each element (math=fast: on the special-function units), over
    # arguments past the range where exp's argument rounding shows
    "gates": problems.problem(
        "        pass",
        "        return F.silu(x) * torch.sigmoid(0.5 * x) / (x * x + 1.0) + torch.exp(-torch.abs(x))",
        "[20.0 * torch.randn(6, 513)]",
    ),
    # statistics materialized in double by one kernel, read by an elementwise one (float4 where aligned)
    "group_norm": problems.problem(
        "        self.gn = nn.GroupNorm(4, 16)", "        return self.gn(x)", "[torch.randn(2, 16, 5, 8)]"
    ),
    # rows over dims 0, 2 and 3 (a batch norm in training mode): its runs of 40 consecutive elements 16 bytes at a
    # time, a block or a warp a row, the row in registers or shared memory
    "batchnorm_training": problems.problem(
        "        self.bn = nn.BatchNorm2d(3)", "        return self.bn(x)", "[2.0 + torch.randn(4, 3, 5, 8)]"
    ),
    # a row's max and sum of exponentials in one kernel, gathered at each row's target, then their mean
    "cross_entropy": problems.problem(
        "        pass",
        "        return F.cross_entropy(x, t)",
        "[3.0 * torch.randn(6, 513), torch.randint(0, 513, (6,))]",
        args="x, t",
    ),
    # a scan down 210 columns: 32 a block, each warp a segment of the 300 rows, 7 tiles (the last part empty)
    "column_cumsum": problems.COLUMN_CUMSUM,
    # truth values reduced: || and && through the block's and the warp's shuffles
    "any_all": problems.problem(
        "        pass", "        return (x > 3.0).any(dim=-1), (x > -2.5).all(dim=0)", "[torch.randn(6, 513)]"
    ),
    # a suffix sum: the scan stores the flipped output itself
    "reverse_cumsum": problems.problem(
        "        pass", "        return x.flip(-1).cumsum(-1).flip(-1)", "[torch.randn(5, 1000)]"
    ),
    "cumprod_short_rows": problems.problem(
        "        pass", "        return torch.cumprod(x, dim=-1)", "[torch.rand(6, 130) + 0.5]"
    ),
    # running extremes' values: max and min scans along rows and down columns
    "cummax_cummin": problems.problem(
        "        pass",
        "        return torch.cummax(x, dim=-1).values, torch.cummin(x, dim=0)[0]",
        "[torch.randn(6, 1000)]",
    ),
    # logcumsumexp: a scan of log(exp(a) + exp(b)), along rows led by -inf and ending in inf (a NaN if computed as
    # a difference of infinities) and down columns of values far apart (exp of them overflows)
    "logcumsumexp": problems.problem(
        "        pass",
        "        return torch.logcumsumexp(x, dim=-1), torch.logcumsumexp(30.0 * x, dim=0)",
        "[torch.cat([torch.full((4, 2), float('-inf')), torch.randn(4, 297), torch.full((4, 1), float('inf'))], 1)]",
    ),
    # concatenations read each element's own piece under a branch: nested, along the reduced dim (row caches, 16-byte
    # groups: pieces of widths that are not multiples of 4) and along the rows
    "cat_pieces": problems.problem(
        "        pass",
        "        y = torch.cat([x, x.exp(), x[:, :3] * 2], dim=1)\n"
        "        return torch.softmax(torch.cat([y, z], -1), -1), torch.cat([x, z[:, :40]], 0).sum(-1)",
        "[torch.randn(6, 40), torch.randn(6, 90)]",
        args="x, z",
    ),
    # pooling windows whose taps along the last dim the vec4 kernel loads as quads shared by its 4 lanes: padded
    # (lane 0's first tap 3 elements into a quad), a 1-d average of a view counting the taps inside the input and
    # followed by more arithmetic, a stride of 3 and a dilation of 2 in ceil mode
    "pool_windows": problems.POOL_WINDOWS,
}


# Every variant of a problem built and run a host thread per CUDA thread takes 10-30 s: the default tier keeps a
# few products, convolutions and epilogues (and the split and segmented rows below), the slow tier (CI runs both)
# every problem's variants, each row layout and feature (a block's, a warp's and a tile's rows, caches, scans).
SLOW = {
    "argmax_argmin",
    "softmax_cumsum",
    "cat_pieces",
    "batchnorm_training",
    "group_norm",
    "standardize_columns",
    "online_softmax",
    "softmax_cumsum_exact_rows",
    "layernorm",
    "masked_softmax",
    "gates",
    "any_all",
    "reverse_cumsum",
    "cumprod_short_rows",
    "cummax_cummin",
    "sum_subtract",
    "cross_entropy",
    "long_k",
    "ragged_groups",
    "transposed_whole_tiles",
    "narrow_columns_batched_scaled",
    "one_buffer_twice",
    "short_rows",
    "whole_tiles",
    "scaled_operands",
    "softmax",
    "logcumsumexp",
    "column_cumsum",
    "short_rows_transposed",
    "narrow_columns",
    "k_parts_epilogue",
    "batched",
    "misaligned_operand",
    # convolutions (each also on wgmma): the default tier keeps channel-major and tap-major, groups, phases, 1-d
    "conv2d_grouped",
    "conv2d_strided_dilated",
    "tap_major_transposed_phases",
    "transposed_strided",
    "conv3d",
    "transposed_phases_3d",
    "transposed_taps_under_stride",
    "conv2d_odd_depth",
    "tap_major_transposed_1d",
    "tap_major_strided_dilated",
    "bmm_scaled_residual",
    "narrow_linear_relu",
}


def _tiered(names: list[str]) -> list[Any]:
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


@pytest.mark.parametrize("name", _tiered(list(SOURCES)))
def test_every_cuda_variant_matches_the_reference_emulated(name: str, tmp_path: Path) -> None:
    source = SOURCES[name]
    plan = plan_graph(capture_problem(source))
    assert all(isinstance(k, RowKernel) for k in plan.kernels)
    tried = variants(plan, "cuda")
    assert len(tried) > 1
    _match_the_reference(source, tmp_path, tried)


def _match_the_reference(source: str, tmp_path: Path, tried: list[Variant], equal_nan: bool = False) -> None:
    for variant in tried:
        ours, refs = run_emulated_cuda(source, tmp_path, variant)
        for out, ref in zip(ours, refs, strict=True):
            torch.testing.assert_close(
                out, ref, atol=1e-4, rtol=1e-4, equal_nan=equal_nan, msg=lambda m, v=variant: f"{v.label()}: {m}"
            )


def test_extrema_keep_nan_as_torch_does_emulated(tmp_path: Path) -> None:
    source = problems.NAN_EXTREMA
    # a variant of each row layout: the combines of a thread's, a warp's and a block's values differ
    layouts = {v.rows: v for v in reversed(variants(plan_graph(capture_problem(source)), "cuda"))}
    assert set(layouts) == {"auto", "warp", "block", "thread"}
    _match_the_reference(source, tmp_path, list(layouts.values()), equal_nan=True)


def test_scans_of_few_long_columns_load_further_ahead_emulated(tmp_path: Path) -> None:
    """A thread per column (70 of them, 3 x 320 rows): each thread loads a chunk of 32 rows ahead, the next chunk
    while this one is scanned (emit._scan_ahead), and scans the last chunk with none left to load; a scan down as
    many rows of 65,536 columns has enough in flight at 8 a thread."""
    source = problems.problem("        pass", "        return torch.cumsum(x, dim=1)", "[torch.randn(3, 320, 70)]")
    plan = plan_graph(capture_problem(source))
    (thread,) = [v for v in variants(plan, "cuda") if v.rows == "thread"]
    code = emit.emit_source(variant_plan(plan, "cuda", thread), "cuda", thread)
    assert "float pf_in0[32];" in code and "float nx_in0[32];" in code and "if (r0 + 32 < 320LL)" in code
    _match_the_reference(source, tmp_path, [thread])
    many = plan_graph(capture_problem(source.replace("randn(3, 320, 70)", "randn(4, 320, 65536)")))
    (kernel,) = many.kernels
    assert isinstance(kernel, RowKernel) and emit._ahead_count(kernel) == emit.AHEAD == 8


# Our own GEMM kernels over ragged tiles: every block of the grid runs, the operands read through their strides
# (on wgmma, as the split kernels lay them out for it: its descriptors' offsets, the waits before a tile is
# refilled or its sums read, and its zeros past the edges are what a wrong layout or a missing wait breaks).
GEMMS = {
    "mm_ragged": ("        return a @ b", "[torch.randn(130, 50), torch.randn(50, 70)]", "a, b"),
    "transposed_operands": ("        return a.t() @ b.t()", "[torch.randn(40, 20), torch.randn(36, 40)]", "a, b"),
    "one_buffer_twice": ("        return a @ a.t()", "[torch.randn(33, 18)]", "a"),
    # operands far from 1 (float16's range is 2^-14..2^15): the f16 form's parts are of the operands scaled by a
    # power of two each, the sums scaled back
    "far_from_one": ("        return a @ b", "[1e-6 * torch.randn(40, 30), 1e5 * torch.randn(30, 20)]", "a, b"),
    # the numbers the operands are scaled by, applied to the product's sums instead
    "scaled_operands": ("        return (a * 0.5) @ (b / 4.0)", "[torch.randn(40, 30), torch.randn(30, 20)]", "a, b"),
    "batched": ("        return torch.bmm(a, b)", "[torch.randn(2, 20, 17), torch.randn(2, 17, 140)]", "a, b"),
    # sums over a long K (tensor cores round each MMA's sum toward zero: carried through 3 x 1024 MMAs, it drifts)
    "long_k": ("        return a @ b", "[torch.randn(8, 8192), torch.randn(8192, 12)]", "a, b"),
    # whole tiles (no bounds tests), 16-byte loads along k of A and along the columns of B
    "whole_tiles": ("        return a @ b", "[torch.randn(128, 32), torch.randn(32, 128)]", "a, b"),
    # 16-byte loads along the rows of A and along k of B (a Linear's weight)
    "transposed_whole_tiles": ("        return a.t() @ b.t()", "[torch.randn(32, 128), torch.randn(128, 32)]", "a, b"),
    # 16-byte groups (sizes multiples of 4) over ragged tiles and a K of one partial step: groups past the edges
    # copied in as zeros
    "ragged_groups": ("        return a @ b", "[torch.randn(132, 36), torch.randn(36, 136)]", "a, b"),
    # at most 64 rows: tiles of 64 rows (3xTF32), A in 16-byte groups along k, then along its rows (transposed)
    "short_rows": ("        return a @ b", "[torch.randn(36, 64), torch.randn(64, 72)]", "a, b"),
    "short_rows_transposed": ("        return a.t() @ b", "[torch.randn(40, 64), torch.randn(40, 136)]", "a, b"),
    # at most 64 columns and more rows: on tensor cores, the transposed product B^T A^T (its columns the tiles' rows)
    "narrow_columns": ("        return a @ b", "[torch.randn(130, 48), torch.randn(48, 20)]", "a, b"),
    "narrow_columns_batched_scaled": (
        "        return torch.bmm(a * 0.5, b)",
        "[torch.randn(2, 70, 36), torch.randn(2, 36, 64)]",
        "a, b",
    ),
    # few tiles of C over a long K: on wgmma, K cut into parts (2 of 18 and 17 steps, the last partial) whose sums
    # a last kernel adds, and then the epilogue
    "k_parts_epilogue": (
        "        return torch.relu(torch.bmm(a, b) + 1.0)",
        "[torch.randn(2, 40, 1100), torch.randn(2, 1100, 30)]",
        "a, b",
    ),
    # an operand 4 bytes past a 16-byte boundary: its loads one element at a time, the other's 16 bytes
    "misaligned_operand": (
        "        return a @ b",
        "[torch.randn(1 + 40 * 32)[1:].view(40, 32), torch.randn(32, 24)]",
        "a, b",
    ),
}


OUR_FP32_GEMMS = ("f16x3", "wgmma", "tf32x3", "pipelined", "tiled")


@pytest.mark.parametrize("name", _tiered(list(GEMMS)))
def test_our_gemm_kernels_match_the_reference_emulated(name: str, tmp_path: Path) -> None:
    forward, inputs, args = GEMMS[name]
    source = problems.problem("        pass", forward, inputs, args=args)
    ours = [v for v in variants(plan_graph(capture_problem(source)), "cuda") if v.gemm in OUR_FP32_GEMMS]
    assert {v.gemm for v in ours} == set(OUR_FP32_GEMMS)
    _match_the_reference(source, tmp_path, ours)


# Rows longer than a block's shared memory keeps (48 KB: 12288 floats), split over blocks that keep their segments
# (cache="segment"): two blocks run at once in the emulator, a row's two segments, taking the rows in turn; a pass
# and its meeting (a LayerNorm's or a GroupNorm's statistics), or two (a softmax's max, then its sum of exponentials).
SEGMENTED = {
    "layernorm": problems.problem(
        "        self.norm = nn.LayerNorm(12500)", "        return self.norm(x)", "[torch.randn(3, 12500)]"
    ),
    "softmax": problems.problem("        pass", "        return torch.softmax(x, dim=-1)", "[torch.randn(3, 12500)]"),
    # a GroupNorm's rows (its groups, 4 channels of 64 x 64) and its output (channels, as the input's) one kernel
    "groupnorm": problems.problem(
        "        self.norm = nn.GroupNorm(2, 8)", "        return self.norm(x)", "[torch.randn(2, 8, 64, 64)]"
    ),
    # a training BatchNorm's channels: rows over dims 0, 2 and 3, runs of 4096 contiguous elements
    "batchnorm": problems.problem(
        "        self.bn = nn.BatchNorm2d(3)", "        return self.bn(x)", "[3.0 + torch.randn(4, 3, 64, 64)]"
    ),
}


@pytest.mark.parametrize("name", list(SEGMENTED))
def test_rows_split_over_blocks_keeping_their_segments_match_the_reference_emulated(name: str, tmp_path: Path) -> None:
    source = SEGMENTED[name]
    segmented = [v for v in variants(plan_graph(capture_problem(source)), "cuda") if v.cache == "segment"]
    assert segmented
    _match_the_reference(source, tmp_path, segmented)


# A GRU over two groups of batch rows (11: 6 and 5, the second short) and lanes with two columns of W_hh (the second
# ragged)
RAGGED_RECURRENCE = problems.problem(
    "        self.gru = nn.GRU(5, 40)", "        return self.gru(x)[0]", "[torch.randn(3, 11, 5)]"
)
# An RNN whose groups' states (8 rows of 1540 floats) are more than a block stages: read from L2 (~25 s emulated)
UNSTAGED_RECURRENCE = problems.problem(
    "        self.rnn = nn.RNN(5, 1540)", "        return self.rnn(x)[0]", "[torch.randn(2, 8, 5)]"
)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(problems.RECURRENCES, marks=pytest.mark.slow),  # each mode's cell (~25 s): on the CPU by default
        RAGGED_RECURRENCE,
        pytest.param(UNSTAGED_RECURRENCE, marks=pytest.mark.slow),
    ],
    ids=["every_mode", "ragged", "unstaged"],
)
def test_recurrences_match_the_reference_emulated(source: str, tmp_path: Path) -> None:
    """A recurrence's steps (emit._cuda_recurrence): a warp per unit and group of batch rows, the group's states
    staged in shared memory, its sums shuffled to every lane, each lane a batch row's cell, the blocks meeting at a
    grid barrier after each step; every mode, both directions at once, with and without biases; W_hh read from L2
    a step, and held in registers (cache="regs")."""
    plan = plan_graph(capture_problem(source))
    recurrences = [k for k in plan.kernels if isinstance(k, RecurrenceKernel)]
    assert len(recurrences) == (6 if source == problems.RECURRENCES else 1)
    assert all(emit.recurrence_in_registers(k) for k in recurrences)
    tried = variants(plan, "cuda")
    assert replace(tried[0], cache="regs") in tried
    ours = next(v for v in tried if v.gemm == "tf32x3")  # (cuBLAS's products do not build here)
    _match_the_reference(source, tmp_path, [ours, replace(ours, cache="regs")])


# 16-bit products on mma.sync (emit._cuda_gemm_mma16): each operand's tile copied along k or along its edge (the
# fragments then transposed by ldmatrix), ragged tiles and a K of partial steps, batches, an operand whose origin is
# not 16-byte aligned (copied by loads and stores), and an epilogue; compared at 16-bit tolerances. The same on
# wgmma (emit._cuda_gemm_wgmma), the operands laid out by a kernel each as 16-bit values.
HALF_GEMMS = {
    "bf16_rows_by_columns": (
        "        return a @ b",
        "[torch.randn(150, 72, dtype=torch.bfloat16), torch.randn(72, 136, dtype=torch.bfloat16)]",
        "a, b",
    ),
    "f16_transposed_operands": (
        "        return a.t() @ b.t()",
        "[torch.randn(40, 136, dtype=torch.float16), torch.randn(136, 40, dtype=torch.float16)]",
        "a, b",
    ),
    "bf16_batched_misaligned_relu": (
        "        return torch.relu(torch.bmm(a, b) * 0.5)",
        "[torch.randn(1 + 2 * 24 * 40, dtype=torch.bfloat16)[1:].view(2, 24, 40), "
        "torch.randn(2, 40, 16, dtype=torch.bfloat16)]",
        "a, b",
    ),
}


@pytest.mark.parametrize("name", list(HALF_GEMMS))
def test_our_16_bit_products_on_tensor_cores_match_the_reference_emulated(name: str, tmp_path: Path) -> None:
    forward, inputs, args = HALF_GEMMS[name]
    source = problems.problem("        pass", forward, inputs, args=args)
    plan = plan_graph(capture_problem(source))
    ours = [v for v in variants(plan, "cuda") if v.gemm in ("wgmma", "mma")]
    assert [v.gemm for v in ours] == ["mma", "wgmma"]
    for variant in ours:
        text = emit.emit_source(variant_plan(plan, "cuda", variant), "cuda", variant)
        kind = "bf16" if "bfloat16" in inputs else "f16"
        # not the WMMA kernel
        assert f"wgmma_{kind}(part" in text if variant.gemm == "wgmma" else "ldmatrix_x4(" in text
        ours, refs = run_emulated_cuda(source, tmp_path, variant)
        for out, ref in zip(ours, refs, strict=True):
            torch.testing.assert_close(out.float(), ref.float(), atol=1e-2, rtol=1e-2, msg=variant.label())


def test_16_bit_products_without_16_byte_groups_keep_the_wmma_kernel() -> None:
    # K = 50: no group of 8 along k of A or down the columns of B ends a row
    plan = plan_graph(capture_problem(problems.BF16_GEMM_ODD))
    mma = [v for v in variants(plan, "cuda") if v.gemm == "mma"]
    text = emit.emit_source(variant_plan(plan, "cuda", mma[0]), "cuda", mma[0])
    assert "wmma::mma_sync" in text and "ldmatrix" not in text


def test_fixed_pooling_windows_load_quads_in_the_vec4_kernel() -> None:
    def vec4_kernels(source: str) -> str:
        plan = plan_graph(capture_problem(source))
        variant = next(v for v in variants(plan, "cuda") if v.vec == 4)
        text = emit.emit_source(variant_plan(plan, "cuda", variant), "cuda", variant)
        return "".join(part.split("extern")[0] for part in text.split("_vec4(")[1:])

    assert vec4_kernels(problems.POOL_WINDOWS).count("const Quad<float> s_w") >= 3
    adaptive = problems.problem(
        "        pass", "        return F.adaptive_max_pool2d(x, (4, 8))", "[torch.randn(2, 3, 12, 16)]"
    )
    text = vec4_kernels(adaptive)
    assert "reinterpret_cast<Quad<float>*>(out0)" in text and "const Quad<float> s_" not in text


# Our convolutions (the problems have no bias: a convolution alone runs on our kernels), every geometry the
# gather handles: strides, padding, dilation, groups, transposed with strides, 1-d and 3-d.
CONVS = {
    "conv2d_strided_dilated": (
        "        self.c = nn.Conv2d(4, 20, 3, stride=2, padding=2, dilation=2, bias=False)",
        "[torch.randn(2, 4, 11, 9)]",
    ),
    "conv2d_grouped": (
        "        self.c = nn.Conv2d(8, 32, (3, 2), padding=1, groups=2, bias=False)",
        "[torch.randn(2, 8, 7, 6)]",
    ),
    "transposed_strided": (
        "        self.c = nn.ConvTranspose2d(6, 18, 3, stride=2, padding=1, output_padding=1, bias=False)",
        "[torch.randn(2, 6, 5, 4)]",
    ),
    "conv1d": ("        self.c = nn.Conv1d(5, 17, 4, padding=3, bias=False)", "[torch.randn(3, 5, 30)]"),
    # transposed with strides: a product per phase of the outputs, over the taps that meet an input (emit._phases)
    "transposed_phases_grouped": (
        "        self.c = nn.ConvTranspose2d(4, 6, 4, stride=2, padding=1, groups=2, bias=False)",
        "[torch.randn(2, 4, 5, 6)]",
    ),
    "transposed_phases_3d": (
        "        self.c = nn.ConvTranspose3d(3, 8, 3, stride=(2, 1, 3), padding=(1, 0, 1), bias=False)",
        "[torch.randn(2, 3, 3, 4, 3)]",
    ),
    # a kernel shorter than the stride: some outputs meet no tap, and the full product (its zeros) is kept
    "transposed_taps_under_stride": (
        "        self.c = nn.ConvTranspose1d(3, 5, 2, stride=3, bias=False)",
        "[torch.randn(2, 3, 7)]",
    ),
    # rows of 27 weights: loaded one at a time (rows of a multiple of 4 go 16 bytes a load)
    "conv2d_odd_depth": ("        self.c = nn.Conv2d(3, 8, 3, bias=False)", "[torch.randn(2, 3, 7, 6)]"),
    "conv3d": ("        self.c = nn.Conv3d(3, 16, 2, bias=False)", "[torch.randn(2, 3, 4, 5, 3)]"),
    # input channels a group in whole K steps: K runs tap-major on 3xTF32 (the weights copied so first, a step's
    # tap and padding found once, emit.tap_major), through strides, dilation, groups, phases, and a 1-d transpose
    "tap_major_strided_dilated": (
        "        self.c = nn.Conv2d(32, 20, 3, stride=2, padding=2, dilation=2, bias=False)",
        "[torch.randn(2, 32, 9, 7)]",
    ),
    "tap_major_grouped": (
        "        self.c = nn.Conv2d(64, 40, (3, 2), padding=1, groups=2, bias=False)",
        "[torch.randn(1, 64, 6, 5)]",
    ),
    "tap_major_transposed_phases": (
        "        self.c = nn.ConvTranspose2d(32, 12, 4, stride=2, padding=1, bias=False)",
        "[torch.randn(1, 32, 4, 5)]",
    ),
    "tap_major_transposed_1d": (
        "        self.c = nn.ConvTranspose1d(32, 8, 3, dilation=2, bias=False)",
        "[torch.randn(2, 32, 10)]",
    ),
    # an input past float16's range (the f16x3 form scales it, and the weights, by a power of two each), tap-major
    "tap_major_far_from_one": ("        self.c = nn.Conv1d(32, 6, 3, bias=False)", "[1e6 * torch.randn(2, 32, 9)]"),
    # on wgmma (emit._conv_wgmma) channel-major over K steps (6 channels by 9 taps), two tiles of output channels
    "channel_major_two_row_tiles": (
        "        self.c = nn.Conv2d(6, 130, 3, padding=1, bias=False)",
        "[torch.randn(1, 6, 5, 7)]",
    ),
}


@pytest.mark.parametrize("name", _tiered(list(CONVS)))
def test_our_convolutions_match_the_reference_emulated(name: str, tmp_path: Path) -> None:
    init, inputs = CONVS[name]
    source = problems.problem(init, "        return self.c(x)", inputs)
    ours = [v for v in variants(plan_graph(capture_problem(source)), "cuda") if v.conv in ("implicit", "direct")]
    assert {v.conv for v in ours} == {"implicit", "direct"}
    _match_the_reference(source, tmp_path, ours)


# Elementwise work after our products and convolutions, run as their epilogue (plan.fuse_epilogues): broadcast
# operands by the output's coordinates, another operand at the output's own element, more than one output.
EPILOGUES = {
    "linear_gelu": problems.problem(
        "        self.fc = nn.Linear(36, 70)", "        return F.gelu(self.fc(x))", "[torch.randn(130, 36)]"
    ),
    # a classifier's head: 10 columns, its product transposed on tensor cores, the bias along the kernel's rows
    "narrow_linear_relu": problems.problem(
        "        self.fc = nn.Linear(36, 10)", "        return torch.relu(self.fc(x))", "[torch.randn(130, 36)]"
    ),
    "bmm_scaled_residual": problems.problem(
        "        pass",
        "        y = torch.bmm(a, b) * 0.5 + r\n        return y, torch.sigmoid(y)",
        "[torch.randn(2, 20, 17), torch.randn(2, 17, 132), torch.randn(2, 20, 132)]",
        args="a, b, r",
    ),
    "conv_bias_relu_affine": problems.problem(
        "        self.c = nn.Conv2d(4, 20, 3, stride=2, padding=1)\n"
        "        self.register_buffer('scale', torch.rand(20, 1, 1) + 0.5)",
        "        return torch.relu(self.c(x)) * self.scale + 0.25",
        "[torch.randn(2, 4, 11, 9)]",
    ),
    "transposed_conv1d_bias_tanh": problems.problem(
        "        self.c = nn.ConvTranspose1d(6, 10, 4, stride=3)",
        "        return torch.tanh(self.c(x))",
        "[torch.randn(2, 6, 9)]",
    ),
}


@pytest.mark.parametrize("name", _tiered(list(EPILOGUES)))
def test_epilogues_of_our_products_and_convolutions_match_the_reference_emulated(name: str, tmp_path: Path) -> None:
    source = EPILOGUES[name]
    plan = plan_graph(capture_problem(source))
    ours = [v for v in variants(plan, "cuda") if v.gemm in OUR_FP32_GEMMS or v.conv in ("implicit", "direct")]
    assert len(ours) >= 2
    for variant in ours:
        assert any(getattr(k, "epilogue", None) for k in variant_plan(plan, "cuda", variant).kernels), variant.label()
    _match_the_reference(source, tmp_path, ours)


# Rows too few for the GPU, split across blocks (emit.split_rows), with segments of 100 elements and 8 blocks in all
# here instead of thousands: a launch per pass and one for the outputs, the blocks' partial results combined by every
# later block.
SPLIT_ROWS = {
    # the whole tensor one row (a Frobenius norm), 16-byte groups, 12 segments
    "whole_tensor_norm": problems.problem(
        "        pass", "        return x / torch.norm(x, p='fro')", "[torch.randn(4, 6, 50)]"
    ),
    # a norm over all but the first dim, rows of 385 (no 16-byte groups), the last segment short
    "layernorm_chw": problems.problem(
        "        self.norm = nn.LayerNorm((5, 7, 11))",
        "        return self.norm(x)",
        "[50.0 + torch.randn(3, 5, 7, 11)]",
    ),
    # two dependent passes (max, then the sum of exponentials) before the outputs
    "softmax": problems.problem("        pass", "        return torch.softmax(x, dim=-1)", "[torch.randn(2, 1000)]"),
    # a batch norm's statistics in training mode: rows over dims 0, 2 and 3, a channel's weight per row; runs of 90
    # consecutive elements (one at a time), then of 64 (16 bytes at a time, segments of 128)
    "batchnorm_training": problems.problem(
        "        self.bn = nn.BatchNorm2d(3)", "        return self.bn(x)", "[torch.randn(4, 3, 9, 10)]"
    ),
    "batchnorm_training_groups": problems.problem(
        "        self.bn = nn.BatchNorm2d(3)", "        return self.bn(x)", "[3.0 + torch.randn(6, 3, 8, 8)]"
    ),
    # columns (a tile of 32 a block, the warps down the segment): three statistics in one pass, 40 columns in 2 tiles
    "column_standardize": problems.problem(
        "        pass", "        return (x - x.mean(dim=0)) / (x.std(dim=0) + 1e-5)", "[3.0 + torch.randn(300, 40)]"
    ),
    # two dependent passes down a middle dim, then the outputs
    "middle_dim_softmax": problems.problem(
        "        pass", "        return torch.softmax(x, dim=1)", "[torch.randn(2, 300, 20)]"
    ),
    # reduced outputs only (the last launch a block per row), truth values and a product among them
    "reduced_outputs": problems.problem(
        "        pass",
        "        return x.sum(dim=(1, 2)), (x > 2.5).any(dim=-1).any(dim=-1), (0.5 + 0.01 * x).prod(dim=-1).amax(-1)",
        "[torch.randn(3, 4, 333)]",
    ),
}


@pytest.mark.parametrize("name", list(SPLIT_ROWS))
def test_split_rows_match_the_reference_emulated(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emit, "SPLIT_MIN_SEGMENT", 100)
    monkeypatch.setattr(emit, "SPLIT_BLOCKS", 8)
    source = SPLIT_ROWS[name]
    plan = plan_graph(capture_problem(source))
    split = [v for v in variants(plan, "cuda") if v.rows == "auto" and v.cache == "none" and v.math == "exact"]
    for variant in split:
        kernels = [k for k in variant_plan(plan, "cuda", variant).kernels if isinstance(k, RowKernel)]
        assert any(k.split > 1 for k in kernels), variant.label()
    # and the rows unsplit (a block each, or 32 a block), the variant tried first
    assert variants(plan, "cuda")[0].rows in ("block", "tile")
    _match_the_reference(source, tmp_path, split[:2])
