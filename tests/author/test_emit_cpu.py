"""The C++ back end against the reference, op family by op family (g++ builds, no sandbox: fast)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

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
    "mean_and_max_dim": ("pass", "return x.mean() + x.max(dim=1, keepdim=True).values", "[torch.randn(4, 6)]", "x"),
    "sum_of_broadcast": ("pass", "return x.unsqueeze(1).expand(4, 9, 6).sum(1)", "[torch.randn(4, 6)]", "x"),
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


@pytest.mark.parametrize("name", list(CASES))
def test_cpu_kernels_match_the_reference(name: str, tmp_path: Path) -> None:
    ours, refs = run_cpu(case_source(name), tmp_path)
    assert len(ours) == len(refs)
    for out, ref in zip(ours, refs, strict=True):
        assert out.shape == ref.shape
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_serial_row_sums_are_compensated(tmp_path: Path) -> None:
    # One core sums each 2^20-element row in order: plain float accumulation drifts by ~2e-5 relative here;
    # compensated summation stays at float rounding of the exact (float64) sum.
    source = problem("        pass", "        return x.sum(dim=1)", "[torch.rand(2, 1 << 20)]")
    (ours,), _ = run_cpu(source, tmp_path)
    torch.manual_seed(0)
    exact = torch.rand(2, 1 << 20, dtype=torch.float32).double().sum(dim=1)
    torch.testing.assert_close(ours.double(), exact, atol=0, rtol=1e-6)
