"""The C++ back end against the reference, op family by op family (g++ builds, no sandbox: fast)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.author import problems
from tests.author.helpers import run_cpu
from tests.author.problems import problem

# name -> (__init__ body, forward body, get_inputs list, forward's parameters)
CASES: dict[str, tuple[str, str, str, str]] = {
    "embedding": ("self.emb = nn.Embedding(50, 16)", "return self.emb(x) * 2", "[torch.randint(0, 50, (4, 7))]", "x"),
    "index_select": (
        "pass",
        "return torch.index_select(x, 1, i) + 1",
        "[torch.randn(5, 9), torch.randint(0, 9, (4,))]",
        "x, i",
    ),
    "gather": ("pass", "return torch.gather(x, 1, i)", "[torch.randn(5, 9), torch.randint(0, 9, (5, 3))]", "x, i"),
    "negative_index": ("pass", "return x[i]", "[torch.randn(6, 5), torch.randint(-6, 6, (3, 2))]", "x, i"),
    # Common subexpressions: the mean and the std's mean one reduction, a keepdim output written by its reduction.
    "standardize_keepdim": (
        "pass",
        "return (x - x.mean(0, keepdim=True)) / x.std(0), x.amax(1, keepdim=True)",
        "[torch.randn(40, 7)]",
        "x",
    ),
    "cat": ("pass", "return torch.cat([x, x.exp(), x[:, :2]], dim=1)", "[torch.randn(5, 9)]", "x"),
    "diag_matmul": ("pass", "return torch.diag(d) @ x", "[torch.randn(6), torch.randn(6, 4)]", "d, x"),
    "matmul_diag": ("pass", "return torch.relu(x @ torch.diag(d))", "[torch.randn(4), torch.randn(6, 4)]", "d, x"),
    "avg_pool_padded": (
        "self.pool = nn.AvgPool2d(3, stride=2, padding=1)",
        "return self.pool(x)",
        "[torch.randn(2, 3, 9, 8)]",
        "x",
    ),
    "max_pool_relu": (
        "self.pool = nn.MaxPool2d(2)",
        "return torch.relu(self.pool(x))",
        "[torch.randn(2, 3, 8, 8)]",
        "x",
    ),
    "cumsum": ("pass", "return torch.cumsum(x * 2, dim=1)", "[torch.randn(8, 32)]", "x"),
    "reverse_cumsum": ("pass", "return x.flip(-1).cumsum(-1).flip(-1)", "[torch.randn(4, 9)]", "x"),
    # stored permuted by the scan itself (flips on two dims, a transpose)
    "cumsum_permuted_out": (
        "pass",
        "return torch.cumsum(x.flip(1), dim=1).flip(0, 1).permute(1, 0, 2)",
        "[torch.randn(4, 70, 3)]",
        "x",
    ),
    "adaptive_avg_pool": (
        "self.pool = nn.AdaptiveAvgPool2d(2)",
        "return self.pool(x)",
        "[torch.randn(2, 3, 8, 6)]",
        "x",
    ),
    "batch_norm_eval": (
        "self.bn = nn.BatchNorm2d(3).eval()",
        "return F.batch_norm(x, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias)",
        "[torch.randn(2, 3, 4, 4)]",
        "x",
    ),
    "cumprod_dim0": ("pass", "return torch.cumprod(x, dim=0)", "[torch.rand(6, 5) + 0.5]", "x"),
    "bmm_softmax": (
        "pass",
        "return torch.bmm(x, y.transpose(1, 2)).softmax(-1)",
        "[torch.randn(3, 5, 8), torch.randn(3, 7, 8)]",
        "x, y",
    ),
    "group_norm": ("self.gn = nn.GroupNorm(4, 16)", "return self.gn(x)", "[torch.randn(2, 16, 5, 5)]", "x"),
    # One-pass statistics (sum and sum of squares in double) where the mean is 10^3 spreads from zero: a float
    # E[x^2] - E[x]^2 would lose every digit of the variance.
    "layer_norm_far_from_zero": (
        "self.norm = nn.LayerNorm(300)",
        "return self.norm(x)",
        "[1e3 + torch.randn(6, 300)]",
        "x",
    ),
    "mean_and_max_dim": ("pass", "return x.mean() + x.max(dim=1, keepdim=True).values", "[torch.randn(4, 6)]", "x"),
    "sum_of_broadcast": ("pass", "return x.unsqueeze(1).expand(4, 9, 6).sum(1)", "[torch.randn(4, 6)]", "x"),
    "conv1d_strided_dilated": (
        "self.conv = nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, bias=False)",
        "return self.conv(x)",
        "[torch.randn(2, 4, 17)]",
        "x",
    ),
    "conv2d_grouped_bias_relu_bn": (
        "self.conv = nn.Conv2d(4, 6, (3, 2), padding=(1, 0), groups=2)\n        self.bn = nn.BatchNorm2d(6).eval()",
        "return self.bn(torch.relu(self.conv(x)))",
        "[torch.randn(2, 4, 7, 6)]",
        "x",
    ),
    "conv2d_depthwise": (
        "self.conv = nn.Conv2d(5, 5, 3, stride=2, padding=1, groups=5)",
        "return self.conv(x)",
        "[torch.randn(2, 5, 9, 8)]",
        "x",
    ),
    "conv3d": ("self.conv = nn.Conv3d(3, 4, 2, padding=1)", "return self.conv(x)", "[torch.randn(2, 3, 4, 5, 3)]", "x"),
    # the convolution reads the flat input itself, in the view's shape
    "conv2d_of_a_view": (
        "self.conv = nn.Conv2d(3, 4, 3, padding=1)",
        "return self.conv(x.view(2, 3, 6, 5))",
        "[torch.randn(2, 90)]",
        "x",
    ),
    "conv_transpose2d": (
        "self.conv = nn.ConvTranspose2d(4, 8, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=2)",
        "return self.conv(x) * 2",
        "[torch.randn(2, 4, 5, 6)]",
        "x",
    ),
    "conv_transpose1d_unit_stride": (
        "self.conv = nn.ConvTranspose1d(3, 2, 4, padding=1, bias=False)",
        "return self.conv(x)",
        "[torch.randn(2, 3, 9)]",
        "x",
    ),
    "avg_pool3d_ceil_without_padding_counted": (
        "self.pool = nn.AvgPool3d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)",
        "return self.pool(x)",
        "[torch.randn(2, 3, 6, 7, 5)]",
        "x",
    ),
    "avg_pool2d_ceil_divisor": (
        "pass",
        "y = F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)\n"
        "        return y[..., :5, :4] + F.avg_pool2d(x, 2, divisor_override=3)",
        "[torch.randn(2, 3, 10, 8)]",
        "x",
    ),
    "max_pool3d_dilated_ceil": (
        "self.pool = nn.MaxPool3d(2, stride=2, padding=1, dilation=2, ceil_mode=True)",
        "return self.pool(x)",
        "[torch.randn(2, 3, 7, 6, 9)]",
        "x",
    ),
    "max_pool1d_ceil": (
        "self.pool = nn.MaxPool1d(3, stride=2, ceil_mode=True)",
        "return self.pool(x)",
        "[torch.randn(2, 3, 10)]",
        "x",
    ),
    "adaptive_avg_pool2d_unequal": (
        "self.pool = nn.AdaptiveAvgPool2d((3, 4))",
        "return self.pool(x)",
        "[torch.randn(2, 3, 7, 9)]",
        "x",
    ),
    "adaptive_max_pool3d": (
        "self.pool = nn.AdaptiveMaxPool3d((2, 3, 2))",
        "return self.pool(x)",
        "[torch.randn(2, 3, 5, 7, 4)]",
        "x",
    ),
    "constant_pad": ("pass", "return F.pad(x, (1, 2, -1, 3), value=0.5) * 2", "[torch.randn(2, 3, 5, 6)]", "x"),
    "reflection_and_replication_pad": (
        "self.a = nn.ReflectionPad2d((2, 1, 1, 2))\n        self.b = nn.ReplicationPad1d(3)",
        "return self.a(x).sum(-1) + self.b(x[:, :, 0])[..., :8]",
        "[torch.randn(2, 3, 5, 5)]",
        "x",
    ),
    "instance_norm_unbatched_then_softmax": (
        "self.norm = nn.InstanceNorm2d(4)\n        self.softmax = nn.Softmax(dim=-1)",
        "return self.softmax(self.norm(x))",
        "[torch.randn(4, 6, 5)]",
        "x",
    ),
    "circular_pad": (
        "self.a = nn.CircularPad2d((1, 2, 2, 1))\n        self.b = nn.CircularPad1d(3)",
        "return self.a(x) * 2, self.b(x[:, 0])",
        "[torch.randn(2, 3, 5, 6)]",
        "x",
    ),
    "slice_scatter_strided": (
        "pass",
        "return torch.slice_scatter(x, torch.tanh(y), dim=1, start=1, end=8, step=3)",
        "[torch.randn(4, 9), torch.randn(4, 3)]",
        "x, y",
    ),
    "index_two_tensors": (
        "pass",
        "return x[:, i, j] * 3",
        "[torch.randn(2, 6, 7, 3), torch.randint(-6, 6, (4, 1)), torch.randint(0, 7, (5,))]",
        "x, i, j",
    ),
    "batch_norm_training_and_inplace_relu": (
        "self.bn = nn.BatchNorm2d(3)\n        self.act = nn.ReLU(inplace=True)",
        "y = x * 2\n        y.add_(1)\n        return self.act(self.bn(y))",
        "[torch.randn(4, 3, 5, 5)]",
        "x",
    ),
    "rms_norm_module": ("self.norm = nn.RMSNorm(8)", "return self.norm(x)", "[torch.randn(3, 4, 8)]", "x"),
    "argmax_argmin_with_ties": (
        "pass",
        "y = torch.round(x * 2)\n"
        "        return torch.argmax(y, dim=1), torch.argmin(y, -1, keepdim=True), y.argmax(), y.argmin(keepdim=True)",
        "[torch.randn(4, 9, 5)]",
        "x",
    ),
    # By a constant: a product with the reciprocal, except where the quotient is rounded (floor of 6x/3 is 2x only
    # from the true quotient); integers floor-divided towards minus infinity (C's division truncates).
    "divide_by_constants": (
        "pass",
        "y = x.float()\n"
        "        return (F.hardswish(y) / 3 + torch.div(y * 6, 3, rounding_mode='floor'), y / 0.25, y / 1e-30,\n"
        "                x // 3, x // -7, torch.div(x, -7, rounding_mode='trunc'))",
        "[torch.randint(-50, 50, (8, 16))]",
        "x",
    ),
    # 16-bit floats: stored as such, computed in float, rounded where the reference's casts round.
    "bf16_bmm_scale_rowsum": (
        "pass",
        "y = torch.bmm(a, b) * 0.5\n        return y, y.sum(dim=-1), torch.cumsum(y, dim=1).amax(dim=1)",
        "[torch.randn(3, 17, 40, dtype=torch.bfloat16), torch.randn(3, 40, 9, dtype=torch.bfloat16)]",
        "a, b",
    ),
    # a Linear's bias and activation as its product's epilogue (a row's sums kept aside for it)
    "linear_gelu_epilogue": (
        "self.l = nn.Linear(24, 40)",
        "return F.gelu(self.l(x)) + x[:, :1]",
        "[torch.randn(9, 24)]",
        "x",
    ),
    # the product's epilogue takes its sums rounded to bfloat16, as the elementwise kernel would have read them
    "bf16_matmul_gelu_epilogue": (
        "pass",
        "return F.gelu(a @ b) * 2.0",
        "[torch.randn(13, 40, dtype=torch.bfloat16), torch.randn(40, 9, dtype=torch.bfloat16)]",
        "a, b",
    ),
    "fp16_rounding_casts": (
        "pass",
        "z = (x.float() * y).half()\n        return z, (z.float() / 3).half().float() + 1, F.softmax(z, dim=-1)",
        "[torch.randn(6, 50, dtype=torch.float16), torch.randn(6, 50)]",
        "x, y",
    ),
    # 600 producers deep, past what one expression may nest (plan.FUSION_DEPTH): split into kernels, not a crash.
    "a_loop_in_forward": (
        "pass",
        "for _ in range(200):\n            x = torch.sin(x) * 1.01 + 0.1\n        return x.sum(dim=-1)",
        "[torch.randn(5, 33)]",
        "x",
    ),
    # argmax / argmin as one reduction of packed keys: ties (the first index wins, -0.0 ties 0.0), NaN (its index
    # wins), 16-bit values, keepdim, over every element
    "argmax_argmin_ties_nan": (
        "pass",
        "return (torch.argmax(x, dim=1), torch.argmin(x, dim=0, keepdim=True), torch.argmax(z, dim=1), "
        "torch.argmin(-z, dim=1), torch.argmax(n, dim=1), torch.argmin(n, dim=0), torch.argmax(h, dim=-1), "
        "torch.argmin(x))",
        "[torch.randint(-3, 3, (6, 40)).float(), torch.where(torch.randint(0, 2, (6, 40)) == 0, -0.0, 0.0) - "
        "(torch.rand(6, 40) < 0.3).float(), torch.where(torch.rand(6, 40) < 0.05, float('nan'), torch.randn(6, 40)), "
        "torch.randn(5, 33).bfloat16()]",
        "x, z, n, h",
    ),
    # pieces read back from a tensor filled piecewise in place: inside one update, outside all, across two
    "slices_of_a_scattered_tensor": (
        "pass",
        "z = torch.zeros(4, 12)\n        z[:, 2:6] = y\n        z[:, 6:9] = y[:, :3] * 3\n"
        "        return z[:, 3:5] * 2, z[:, 10:] + 1, z[:, 4:8], z[:, 7]",
        "[torch.randn(4, 4)]",
        "y",
    ),
    # recurrences: the cells' in-place gate updates read back through their slice_scatters, the cell state
    # materialized every few steps (plan.FUSION_NODES)
    "lstm_and_gru": (
        "self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True)\n        self.gru = nn.GRU(6, 8, batch_first=True)",
        "out, (h, c) = self.lstm(x)\n        return out, c, self.gru(x)[1]",
        "[torch.randn(3, 20, 6)]",
        "x",
    ),
    # tensor bounds: a maximum and a minimum; cosine_similarity's norms clamped by a broadcast tensor
    "clamp_tensor_bounds": (
        "pass",
        "return torch.clamp(x, min=lo, max=hi), torch.clamp(x, min=lo), 1 - F.cosine_similarity(x, hi, dim=1)",
        "[torch.randn(6, 40), -torch.rand(6, 40), torch.rand(1, 40)]",
        "x, lo, hi",
    ),
    # any and all over bool rows, and the SDPA decomposition that uses any (a fully masked row's check)
    "any_all_sdpa": (
        "pass",
        "return (x > 1.5).any(dim=-1), (x > -2).all(dim=0), F.scaled_dot_product_attention(x, y, z)",
        "[torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 8)]",
        "x, y, z",
    ),
    "bilinear_interpolation": (
        "pass",
        "return F.interpolate(x, scale_factor=2, mode='bilinear'), F.interpolate(x, size=(7, 5), mode='bilinear', "
        "align_corners=True)",
        "[torch.randn(2, 3, 6, 9)]",
        "x",
    ),
    # torch's decompositions of bicubic interpolation and of grid_sample (bilinear, nearest and bicubic, zeros and
    # border padding, points past the edges): gathers at computed positions, weighted
    "bicubic_and_grid_sample": (
        "pass",
        "return (F.interpolate(x, scale_factor=2, mode='bicubic'), F.interpolate(x, size=(7, 5), mode='bicubic', "
        "align_corners=True), F.grid_sample(x, g, align_corners=False), F.grid_sample(x, g, mode='nearest', "
        "padding_mode='border', align_corners=True), F.grid_sample(x, g, mode='bicubic', align_corners=False))",
        "[torch.randn(2, 3, 6, 9), 2.4 * torch.rand(2, 5, 4, 2) - 1.2]",
        "x, g",
    ),
    # nn.Bilinear (aten._trilinear) as a product and row sums, with leading dims and without a bias; the generic
    # form (operands unsqueezed, multiplied, summed)
    "bilinear_and_trilinear": (
        "self.b = nn.Bilinear(16, 24, 8)\n        self.c = nn.Bilinear(16, 24, 5, bias=False)",
        "return self.b(x[0], y[0]), self.c(x, y), torch.ops.aten._trilinear(x[0, :4], y[0, :4, :16], x[1, :4], [0], "
        "[1], [0], [2])",
        "[torch.randn(3, 5, 16), torch.randn(3, 5, 24)]",
        "x, y",
    ),
    # the batch flattened into the product's rows (read in place), its output reshaped back (written in place)
    "matmul_3d_by_2d": (
        "pass",
        "return torch.matmul(a, b), torch.matmul(a.transpose(1, 2), a).reshape(3, -1)",
        "[torch.randn(3, 17, 40), torch.randn(40, 9)]",
        "a, b",
    ),
    # max with its indices, pieces of a tensor (chunk, split, unbind), repeat, a bool's ~, torch.tensor(scalar)
    "indices_pieces_and_constants": (
        "pass",
        "v, i = torch.max(x, dim=1)\n        a, b = x.chunk(2, dim=-1)\n"
        "        c, d, e = torch.split(x, [3, 4, 5], 1)\n        r = torch.unbind(x, 0)\n"
        "        return v, i, a * b, c.sum(1) + d.mean(1) + e.amax(1), r[1] - r[2], x.repeat(2, 1)[:, :3], "
        "~(x > 0), torch.min(x, torch.tensor(0.25))",
        "[torch.randn(5, 12)]",
        "x",
    ),
    # a 16-bit convolution: operands converted on load, sums in float, rounded once on store (without a bias: it
    # is added after the rounded sums, as on the GPU, where torch's CPU kernels add it before rounding)
    "bf16_conv": (
        "self.c = nn.Conv2d(4, 6, 3, padding=1, bias=False).to(torch.bfloat16)",
        "return self.c(x)",
        "[torch.randn(2, 4, 9, 7, dtype=torch.bfloat16)]",
        "x",
    ),
    # the maximum kept as a column, then statistics of that column: the staged column is read, not made again
    "linear_max_mean_gelu": (
        "self.l = nn.Linear(24, 40)",
        "y = torch.max(self.l(x), dim=1, keepdim=True).values\n        return F.gelu(y - y.mean(dim=1, keepdim=True))",
        "[torch.randn(9, 24)]",
        "x",
    ),
    "integer_arithmetic": (
        "pass",
        "return torch.roll(x, shifts=3, dims=1), torch.remainder(i, 7) - torch.fmod(i, -5)",
        "[torch.randn(6, 40), torch.randint(-50, 50, (6, 40))]",
        "x, i",
    ),
    # running extremes: their values a scan; where each was found is unsupported (test_plan)
    "cummax_cummin": (
        "pass",
        "return torch.cummax(x, dim=1).values, torch.cummin(x.int(), dim=0)[0]",
        "[torch.randn(9, 70) * 10]",
        "x",
    ),
    # logcumsumexp as a scan of log(exp(a) + exp(b)): rows led by -inf, values whose exp overflows, an inf
    "logcumsumexp": (
        "pass",
        "return torch.logcumsumexp(x, dim=1), torch.logcumsumexp(100.0 * x, dim=0)",
        "[torch.cat([torch.full((5, 2), float('-inf')), torch.randn(5, 60), torch.full((5, 1), float('inf'))], 1)]",
        "x",
    ),
    # the distances of rows' pairs: the pairs from an iota, the rows gathered by them, norms of every order
    "pdist": (
        "pass",
        "return torch.tanh(F.pdist(x)), F.pdist(x, p=1.0), F.pdist(x, p=float('inf')), F.pdist(x[:4], p=3.0)",
        "[torch.randn(37, 24)]",
        "x",
    ),
    # distances between two sets' rows: Euclidean over 25 rows as torch computes them (norms and a product), the
    # others a norm of each pair's difference; and a loss whose decomposition starts from an empty tensor
    "cdist_bce_with_logits": (
        "pass",
        "return (torch.cdist(x, y), torch.cdist(x[:, :20], y, p=1.0), torch.cdist(x[:, :9], y[:, :7]), "
        "torch.cdist(x, y, compute_mode='donot_use_mm_for_euclid_dist'), "
        "F.binary_cross_entropy_with_logits(x, x.sigmoid()))",
        "[torch.randn(2, 30, 8), torch.randn(2, 12, 8)]",
        "x, y",
    ),
    # RReLU in eval mode (its slopes' mean; F.rrelu's default): training mode's random slopes are refused
    "rrelu_eval": (
        "self.act = nn.RReLU(0.1, 0.3)\n        self.eval()",
        "return self.act(x) + F.rrelu(x)",
        "[torch.randn(4, 9)]",
        "x",
    ),
    # EmbeddingBag over bags of one size: the lookup and a reduction per bag, padding left out (a bag of padding
    # alone, the first, gives zeros), per-sample weights
    "embedding_bag_fixed": (
        "self.bag = nn.EmbeddingBag(30, 8, mode='max', padding_idx=0)",
        "return (self.bag(x), F.embedding_bag(x, self.bag.weight, mode='mean', padding_idx=0), "
        "F.embedding_bag(x, self.bag.weight, mode='sum', per_sample_weights=w))",
        "[torch.cat([torch.zeros(1, 5, dtype=torch.long), torch.randint(0, 30, (5, 5))]), torch.rand(6, 5)]",
        "x, w",
    ),
    # F.fold as each tap's patch placed at its offset and the blocks' stride, summed (overlapping taps, padding,
    # dilation, unbatched), and an unfold folded back
    "fold": (
        "self.fold = nn.Fold((9, 11), (3, 2), dilation=(2, 1), padding=(1, 0), stride=(2, 3))",
        "return (self.fold(x), F.fold(x[0], (9, 11), (3, 2), dilation=(2, 1), padding=(1, 0), stride=(2, 3)), "
        "F.fold(F.unfold(y, 3, padding=1), (6, 7), 3, padding=1))",
        "[torch.randn(2, 24, 16), torch.randn(2, 3, 6, 7)]",
        "x, y",
    ),
    # Tensor.unfold: an image's patches (windows side by side, a ragged tail left out) and overlapping, gapped
    # windows of a sequence
    "tensor_unfold": (
        "pass",
        "return (x.unfold(2, 4, 4).unfold(3, 4, 4).reshape(2, 3, -1, 16) * 2, "
        "torch.tanh(x.unfold(-1, 3, 1)), x.unfold(1, 2, 3).sum(-1))",
        "[torch.randn(2, 3, 9, 8)]",
        "x",
    ),
    # an average pooling to one element of a transposed input: the decomposition unsqueezes its mean by an
    # as_strided, which is a reshape
    "pooled_transposed": (
        "self.pool = nn.AdaptiveAvgPool1d(1)",
        "return torch.flatten(self.pool(x.transpose(1, 2)), 1) * 3",
        "[torch.randn(4, 49, 24)]",
        "x",
    ),
    "two_outputs": (
        "pass",
        "z = F.silu(x) + 1\n        return z, torch.logsumexp(z, dim=-1)",
        "[torch.randn(7, 33)]",
        "x",
    ),
}


def case_source(name: str) -> str:
    init, forward, inputs, args = CASES[name]
    return problem(f"        {init}", f"        {forward}", inputs, args=args)


def test_recurrences_match_the_reference_on_the_cpu(tmp_path: Path) -> None:
    ours, refs = run_cpu(problems.RECURRENCES, tmp_path)
    for out, ref in zip(ours, refs, strict=True):
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", list(CASES))
def test_cpu_kernels_match_the_reference(name: str, tmp_path: Path) -> None:
    ours, refs = run_cpu(case_source(name), tmp_path)
    assert len(ours) == len(refs)
    for out, ref in zip(ours, refs, strict=True):
        assert out.shape == ref.shape and out.dtype == ref.dtype
        # 16-bit outputs: assert_close's tolerances for their type (a rounding apart, where ours rounds once)
        tolerance = {} if ref.dtype in (torch.bfloat16, torch.float16) else {"atol": 1e-4, "rtol": 1e-4}
        torch.testing.assert_close(out, ref, **tolerance)


def test_extrema_keep_nan_as_torch_does_on_the_cpu(tmp_path: Path) -> None:
    ours, refs = run_cpu(problems.NAN_EXTREMA, tmp_path)
    for out, ref in zip(ours, refs, strict=True):
        assert ref.isnan().any()
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4, equal_nan=True)


def test_a_long_product_sums_in_two_levels_on_the_cpu(tmp_path: Path) -> None:
    """A matrix-vector product over K = 2^20 positive terms: one running float sum drifts past the tolerance from
    the exact result (the verifier's float64 second opinion) where the reference's blocked sums do not."""
    source = problem(
        "        pass", "        return a @ b", "[torch.rand(2, 1 << 20), torch.rand(1 << 20, 1)]", args="a, b"
    )
    (ours,), (ref,) = run_cpu(source, tmp_path)
    torch.manual_seed(0)
    a, b = torch.rand(2, 1 << 20), torch.rand(1 << 20, 1)
    exact = a.double() @ b.double()
    assert torch.equal(ref, a @ b)  # the inputs the run drew
    assert ((ours.double() - exact).abs() <= 1e-4 + 1e-4 * exact.abs() + (ref.double() - exact).abs()).all()


def test_a_half_transposed_convolution_rounds_once(tmp_path: Path) -> None:
    """Against the exact result: torch's CPU kernel rounds along the way (further off than ours), so it is no
    reference for a kernel that sums in float and rounds once."""
    source = problem(
        "        self.t = nn.ConvTranspose1d(3, 5, 4, stride=2, bias=False).half()",
        "        return self.t(y)",
        "[torch.randn(2, 3, 11, dtype=torch.float16)]",
        args="y",
    )
    (ours,), _ = run_cpu(source, tmp_path)
    module = types.ModuleType("half_transposed")
    exec(source, module.__dict__)
    torch.manual_seed(0)  # as run_cpu builds them
    model = module.Model()
    (y,) = module.get_inputs()
    exact = F.conv_transpose1d(y.double(), model.t.weight.double(), stride=2)
    assert ours.dtype == torch.float16
    assert bool(((ours.double() - exact).abs() <= exact.abs() * 2.0**-11 + 1e-6).all())  # half an fp16 ulp


def test_a_division_by_a_constant_is_a_product_unless_rounded() -> None:
    from cuda_agent.author.search import author_problem

    authored = author_problem(case_source("divide_by_constants"), "cuda")
    kernel = authored.variants[0][1]["kernels/author.cu"]
    assert "* 0.3333333" in kernel and "* 4.0f" in kernel  # / 3 and / 0.25
    assert "/ (3.0f)" in kernel  # the floor's quotient


def test_serial_row_sums_are_compensated(tmp_path: Path) -> None:
    # One core sums each 2^20-element row in order: plain float accumulation drifts by ~2e-5 relative here;
    # compensated summation stays at float rounding of the exact (float64) sum.
    source = problem("        pass", "        return x.sum(dim=1)", "[torch.rand(2, 1 << 20)]")
    (ours,), _ = run_cpu(source, tmp_path)
    torch.manual_seed(0)
    exact = torch.rand(2, 1 << 20, dtype=torch.float32).double().sum(dim=1)
    torch.testing.assert_close(ours.double(), exact, atol=0, rtol=1e-6)


LEGACY_FUNCTION = '''
class ScaledSquare(torch.autograd.Function):
    """The legacy style (forward(ctx, ...), no setup_context), which functorch's transforms refuse."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * x * ctx.k

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * ctx.k * x, None
'''


def test_a_legacy_autograd_function_is_traced_through_its_forward(tmp_path: Path) -> None:
    source = problem("        pass", "        return torch.tanh(ScaledSquare.apply(x, 3.0))", "[torch.randn(6, 40)]")
    source = source.replace("\n\nclass Model", LEGACY_FUNCTION + "\n\nclass Model", 1)
    ours, refs = run_cpu(source, tmp_path)
    torch.testing.assert_close(ours[0], refs[0], atol=1e-4, rtol=1e-4)
    traced = [c for c in torch.autograd.Function.__subclasses__() if c.__name__ == "ScaledSquare"]
    assert traced and all("apply" not in c.__dict__ for c in traced)  # the trace's stand-in is gone
