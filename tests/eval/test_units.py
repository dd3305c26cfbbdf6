"""Pure-Python parts of the evaluation library: tolerances, reward, comparison, static scan, baseline cache,
Nsight Compute CSV parsing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cuda_agent.contracts.common import TolerancePreset
from cuda_agent.contracts.compile import CandidateForm, CandidateSource
from cuda_agent.contracts.eval import ProfileRequest, TimingStats
from cuda_agent.eval import compare
from cuda_agent.eval.baselines import BaselineCache, BaselineEntry, baseline_key
from cuda_agent.eval.evaluate import stats
from cuda_agent.eval.profile import checklist, parse_ncu_csv, profile_candidate, report_text
from cuda_agent.eval.protocol import ChildTimings
from cuda_agent.eval.reward import continuous_speedup, reward_for
from cuda_agent.eval.static_scan import scan_candidate, scan_python
from cuda_agent.eval.tolerance import tolerance_for
from tests.eval.helpers import RELU_ADD, TRANSPOSE_NEW

DATA = Path(__file__).parent / "data"


def test_tolerance_profiles() -> None:
    assert tolerance_for(TolerancePreset.KERNELBENCH, "torch.float32").atol == 1e-4
    assert tolerance_for(TolerancePreset.KERNELBENCH, "torch.bfloat16").rtol == 1e-2
    assert tolerance_for(TolerancePreset.PAPER, "torch.float32").atol == 1e-2
    strict = tolerance_for(TolerancePreset.STRICT, "torch.float16")
    assert (strict.atol, strict.rtol) == (1e-5, 1e-3)


@pytest.mark.parametrize(
    ("correct", "eager", "compiled", "expected"),
    [
        (False, 5.0, 5.0, -1.0),
        (True, 1.2, 1.2, 3.0),
        (True, 1.2, 0.9, 2.0),
        (True, 1.05, 1.2, 1.0),  # equal to the threshold is not faster
        (True, None, None, 1.0),
        (True, 1.5, None, 2.0),  # a missing compile baseline never counts as beaten
    ],
)
def test_reward(correct: bool, eager: float | None, compiled: float | None, expected: float) -> None:
    assert reward_for(correct, eager, compiled, 1.05) == expected


def test_continuous_speedup_is_geometric_mean() -> None:
    assert continuous_speedup(2.0, 8.0) == pytest.approx(4.0)
    assert continuous_speedup(None, 3.0) == pytest.approx(3.0)
    assert continuous_speedup(None, None) is None


def test_timing_stats() -> None:
    s = stats(ChildTimings(method="cuda_events", samples_ms=[1.0, 2.0, 3.0, 10.0], host_samples_ms=[1.5] * 4))
    assert (s.median_ms, s.min_ms, s.max_ms, s.trials) == (2.5, 1.0, 10.0, 4)
    assert s.samples_ms == [1.0, 2.0, 3.0, 10.0] and s.host_samples_ms == [1.5] * 4


def test_compare_rejects_shape_dtype_nan_and_tolerance() -> None:
    ref = torch.ones(4, 4)
    kb = TolerancePreset.KERNELBENCH
    assert compare.compare_one(ref + 5e-5, ref, kb)[0]
    assert not compare.compare_one(ref + 1e-3, ref, kb)[0]
    assert compare.compare_one(ref + 1e-3, ref, TolerancePreset.PAPER)[0]
    assert "shape" in compare.compare_one(torch.ones(16), ref, kb)[1]
    assert "dtype" in compare.compare_one(ref.double(), ref, kb)[1]
    nan = ref.clone()
    nan[0, 0] = float("nan")
    assert "NaN" in compare.compare_one(nan, ref, kb)[1]
    assert "not a tensor" in compare.compare_one(None, ref, kb)[1]
    assert not compare.compare_one(torch.tensor([1, 2]), torch.tensor([1, 3]), kb)[0]


def test_compare_trials_counts_and_reports() -> None:
    ref = [[torch.ones(3)], [torch.zeros(3)]]
    result = compare.compare_trials([[torch.ones(3)], [torch.ones(3)]], ref, TolerancePreset.KERNELBENCH)
    assert result.passed == 1 and result.failures[0].startswith("trial 1 output 0")
    assert (
        "returned 2 outputs"
        in compare.compare_trials([[torch.ones(3), torch.ones(3)]], ref[:1], "kernelbench").failures[0]
    )  # type: ignore[arg-type]


def test_degenerate_problems_are_named() -> None:
    kb = TolerancePreset.KERNELBENCH
    assert "all-zeros" in (compare.degenerate_reason([[torch.full((8,), 1e-6)], [torch.full((8,), 2e-6)]], kb) or "")
    assert "constant" in (compare.degenerate_reason([[torch.full((8,), 5.0)], [torch.full((8,), 5.00001)]], kb) or "")
    assert "does not depend" in (compare.degenerate_reason([[torch.arange(8.0)], [torch.arange(8.0)]], kb) or "")
    assert "NaN" in (compare.degenerate_reason([[torch.tensor([float("inf")])]], kb) or "")
    assert compare.degenerate_reason([[torch.randn(8)], [torch.randn(8)]], kb) is None


def test_outputs_file_must_hold_plain_tensors(tmp_path: Path) -> None:
    good = tmp_path / "good.pt"
    torch.save({"trials": [[torch.ones(2), None]], "spot": []}, good)
    assert compare.load_outputs(good)["trials"][0][1] is None
    bad = tmp_path / "bad.pt"
    torch.save({"trials": [[3]], "spot": []}, bad)
    with pytest.raises(compare.OutputsUnreadable):
        compare.load_outputs(bad)
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(compare.OutputsUnreadable):
        compare.load_outputs(tmp_path / "junk.pt")


def test_static_scan_accepts_clean_candidates() -> None:
    assert scan_python(TRANSPOSE_NEW, "model_new.py") == []
    load_inline_style = (
        "import os\nimport torch\nfrom torch.utils.cpp_extension import load_inline\n"
        "os.environ['TORCH_CUDA_ARCH_LIST'] = '9.0'\nsrc = '__global__ void k() {}'\n"
        "class ModelNew(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        setattr(self, 'w0', torch.nn.Parameter(torch.ones(1)))\n"
    )
    assert scan_python(load_inline_style, "model_new.py") == []


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("import ctypes\n", "static_forbidden_import"),
        ("from gc import get_objects\n", "static_forbidden_import"),
        ("import torch\ntorch._C._set_grad_enabled(False)\n", "static_private_torch_api"),
        ("import torch.utils._python_dispatch\n", "static_private_torch_api"),
        ("import time\ntime.perf_counter = lambda: 0\n", "static_monkeypatch"),
        ("import torch\nsetattr(torch, 'allclose', None)\n", "static_monkeypatch"),
        ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n", "static_backend_flags_changed"),
        ("import torch\ntorch.manual_seed(0)\n", "static_rng_reseeded"),
        ("import os\nos.environ['CUDA_AGENT_X'] = '1'\n", "static_environ_tampered"),
        ("import os\nos._exit(0)\n", "static_process_or_file_control"),
        ("x = eval('1')\n", "static_dynamic_code"),
        ("open('/etc/passwd')\n", "static_file_access"),
        ("f = (lambda: 0).__globals__\n", "static_introspection"),
        ("import torch\nf = torch.compile(lambda x: x)\n", "static_torch_machinery"),
        ("src = 'void f() { system(\"ls\"); }'\n", "static_native_escape"),
        ("from cuda_agent.eval import child\n", "static_forbidden_import"),
        ("from cuda_agent import kernels\nkernels._count_launch()\n", "static_private_api"),
    ],
)
def test_static_scan_rules(source: str, code: str) -> None:
    assert code in {f.code for f in scan_python(source, "model_new.py")}


def test_static_scan_of_native_files() -> None:
    source = CandidateSource(
        form=CandidateForm.PROJECT,
        files={"model_new.py": TRANSPOSE_NEW, "kernels/k.cu": "#include <dlfcn.h>\nvoid* h = dlopen(0, 0);\n"},
    )
    assert [f.code for f in scan_candidate(source)] == ["static_native_escape"]


def test_baseline_cache_roundtrip(tmp_path: Path) -> None:
    cache = BaselineCache(tmp_path / "eval" / "baselines.json")
    key = baseline_key("p", "cuda", "NVIDIA H200", "580", "13.0", "2.11", "1")
    assert key != baseline_key("p", "cuda", "NVIDIA H200", "581", "13.0", "2.11", "1")
    assert cache.get(key) is None
    timing = TimingStats(median_ms=1.0, mean_ms=1.0, std_ms=0.0, min_ms=1.0, max_ms=1.0, trials=1)
    cache.put(key, BaselineEntry(eager=timing, notes={"compile": "unavailable"}))
    entry = cache.get(key)
    assert entry is not None and entry.eager == timing and entry.compile is None
    (tmp_path / "eval" / "baselines.json").write_text("{corrupt")
    assert cache.get(key) is None


def test_ncu_csv_parse_and_checklist() -> None:
    profiles = parse_ncu_csv((DATA / "ncu_sample.csv").read_text())
    assert [p.kernel.split("(")[0] for p in profiles] == ["tiled_gemm", "relu_add_kernel"]  # aten fill dropped
    gemm, relu = profiles
    assert gemm.duration_us == pytest.approx(1_204_500.0) and gemm.block_size == 1024
    assert relu.duration_us == pytest.approx(12.5)  # two launches averaged
    assert relu.dram_throughput_pct == pytest.approx(88.71) and relu.l2_hit_rate_pct == pytest.approx(33.9)
    items = checklist(profiles)
    text = "\n".join(items)
    assert "tiled_gemm: low occupancy 18%" in text
    assert "tiled_gemm: warp divergence" in text
    assert "168 registers" in text
    assert "relu_add_kernel: high L2 miss rate" in text and "coalesce" in text
    assert "relu_add_kernel: memory-bound" in text
    assert "relu_add_kernel: warp divergence" not in text
    assert report_text(profiles, items).splitlines()[1].startswith("tiled_gemm | 1204500.0 | 18%")


def test_ncu_garbage_parses_to_nothing() -> None:
    assert parse_ncu_csv("==PROF== ERR_NVGPUCTRPERM - no permission\n") == []


def test_profile_without_ncu_is_a_clear_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cuda_agent.eval.profile.find_ncu", lambda: None)
    source = CandidateSource(form=CandidateForm.KERNELBENCH, files={"model_new.py": TRANSPOSE_NEW})
    result = profile_candidate(ProfileRequest(problem_source=RELU_ADD, candidate=source))
    assert not result.ok and "ncu" in result.message
