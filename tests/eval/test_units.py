"""Pure-Python parts of the evaluation library: tolerances, reward, comparison, memory plan, the channel and the
shared buffer (real sockets, a real memfd), static scan, baseline cache, Nsight Compute CSV parsing."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
import torch

from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.contracts.common import TolerancePreset
from cuda_agent.contracts.eval import ProfileRequest, TimingStats
from cuda_agent.eval import compare, memory
from cuda_agent.eval.baselines import BaselineCache, BaselineEntry, baseline_key
from cuda_agent.eval.child.channel import MAX_MESSAGE, Channel, ChannelClosed, ChannelError
from cuda_agent.eval.child.protocol import ChildTimings, Compared, OutputMeta
from cuda_agent.eval.child.shared import SharedBuffer, SharedBufferError
from cuda_agent.eval.evaluate import SPOT_NEAR_MISS, Trials
from cuda_agent.eval.profile import checklist, parse_ncu_csv, profile_candidate, report_text
from cuda_agent.eval.reward import continuous_speedup, reward_for
from cuda_agent.eval.static_scan import scan_candidate, scan_python
from cuda_agent.eval.timing import stats
from cuda_agent.eval.tolerance import tolerance_for
from cuda_agent.problem import load_problem
from tests.eval.helpers import RELU_ADD, TRANSPOSE, TRANSPOSE_NEW

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


def test_compare_rejects_nan_tolerance_and_integer_differences() -> None:
    ref = torch.ones(4, 4)
    kb = TolerancePreset.KERNELBENCH
    assert compare.compare_one(ref + 5e-5, ref, kb)[0]
    assert not compare.compare_one(ref + 1e-3, ref, kb)[0]
    assert compare.compare_one(ref + 1e-3, ref, TolerancePreset.PAPER)[0]
    nan = ref.clone()
    nan[0, 0] = float("nan")
    assert "NaN" in compare.compare_one(nan, ref, kb)[1]
    assert not compare.compare_one(torch.tensor([1, 2]), torch.tensor([1, 3]), kb)[0]
    half = torch.ones(8, dtype=torch.bfloat16)
    assert compare.compare_one(half, half, kb) == (True, "", 0.0)


def test_an_output_as_close_to_a_float64_run_as_the_reference_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 300)  # the three tensors chunked alike
    kb = TolerancePreset.KERNELBENCH
    exact = torch.linspace(-1.0, 1.0, 1001, dtype=torch.float64)
    # a reference rounded far past the tolerance (a long float32 running sum does this near its zero crossings)
    ref = (exact + 3e-4 * torch.cos(exact * 40)).float()
    accurate = exact.float()
    assert not compare.compare_one(accurate, ref, kb)[0]
    assert compare.compare_one(accurate, ref, kb, exact)[0]
    assert compare.compare_one(ref.clone(), ref, kb, exact)[0]  # as far off as the reference: still passes
    off = accurate.clone()
    off[900] = (exact[900] - 8e-4 * torch.cos(exact[900] * 40)).item()  # farther, on the other side
    assert not compare.compare_one(off, ref, kb, exact)[0]
    # where the reference is exact, the second opinion gives no slack
    wrong = accurate.clone()
    wrong[10] += 1e-3
    ok, why, _ = compare.compare_one(wrong, accurate, kb, exact)
    assert not ok and "float64" in why
    assert not compare.compare_outputs([wrong], [accurate], kb, [exact]).passed
    assert compare.exact_candidates([accurate]) and not compare.exact_candidates(
        [exact, torch.ones(2, dtype=torch.int64)]
    )


def test_compare_in_chunks_finds_one_wrong_element(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunked comparison agrees with torch.allclose, including one bad element in the last chunk."""
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 1000)
    ref = torch.randn(10_007)
    cand = ref.clone()
    assert compare.compare_one(cand, ref, TolerancePreset.KERNELBENCH)[0]
    cand[-1] += 1.0
    ok, why, err = compare.compare_one(cand, ref, TolerancePreset.KERNELBENCH)
    assert not ok and not torch.allclose(cand, ref, atol=1e-4, rtol=1e-4)
    assert err == pytest.approx(1.0, rel=1e-3) and "exceeds atol" in why


@pytest.mark.parametrize("preset", list(TolerancePreset))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_compare_agrees_with_torch_allclose_under_every_tolerance_profile(
    preset: TolerancePreset, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Errors spread around each profile's threshold: the chunked verdict is torch.allclose's, every time."""
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 777)
    tol = tolerance_for(preset, str(dtype))
    generator = torch.Generator().manual_seed(7)
    ref = (torch.randn(5_000, generator=generator) * 3).to(dtype)
    for scale in (0.0, 0.25, 0.9, 1.1, 4.0, 100.0):
        noise = torch.rand(5_000, generator=generator) * scale * (tol.atol + tol.rtol * ref.float().abs())
        cand = (ref.float() + noise).to(dtype)
        expected = torch.allclose(cand.float(), ref.float(), atol=tol.atol, rtol=tol.rtol)
        assert compare.compare_one(cand, ref, preset)[0] == expected, (preset, dtype, scale)


def test_shape_and_dtype_mismatches_are_named() -> None:
    ref = [OutputMeta(shape=[128, 256], dtype="torch.float32"), None]
    same = [OutputMeta(shape=[128, 256], dtype="torch.float32"), None]
    assert compare.meta_mismatch(same, ref) == []
    shape = compare.meta_mismatch([OutputMeta(shape=[256, 128], dtype="torch.float32"), None], ref)
    assert shape == ["output 0: output shape (256, 128) != expected (128, 256)"]
    dtype = compare.meta_mismatch([OutputMeta(shape=[128, 256], dtype="torch.float64"), None], ref)
    assert "dtype torch.float64" in dtype[0]
    assert "not a tensor" in compare.meta_mismatch([None, None], ref)[0]
    assert "returned 1 outputs, expected 2" in compare.meta_mismatch(same[:1], ref)[0]


def test_compare_outputs_reports_each_failure() -> None:
    result = compare.compare_outputs([torch.ones(3), None], [torch.zeros(3), torch.ones(2)], "kernelbench")  # type: ignore[arg-type]
    assert not result.passed and result.failures[0].startswith("output 0: max abs error 1")
    assert result.max_abs_error == 1.0


def test_degenerate_problems_are_named() -> None:
    kb = TolerancePreset.KERNELBENCH
    assert "all-zeros" in (compare.degenerate_reason([torch.full((8,), 1e-6)], kb) or "")
    assert "constant" in (compare.degenerate_reason([torch.full((8,), 5.0)], kb) or "")
    assert "NaN" in (compare.degenerate_reason([torch.tensor([float("inf")])], kb) or "")
    assert compare.degenerate_reason([torch.randn(8)], kb) is None
    # Outputs that do not depend on the inputs show across trials, through equal fingerprints.
    trials = Trials()
    trials.degenerate = [None, None]
    trials.ref_fingerprints = [compare.fingerprint([torch.arange(8.0)])] * 2
    assert "does not depend" in (trials.degenerate_reason() or "")
    trials.ref_fingerprints[1] = compare.fingerprint([torch.arange(8.0).flip(0)])
    assert trials.degenerate_reason() is None
    trials.cand_fingerprints = [compare.fingerprint([torch.zeros(8)])] * 2
    assert trials.constant_output()


def test_memory_plan_from_the_meta_device_and_refusal_naming_sizes() -> None:
    problem = load_problem(TRANSPOSE, name="kb_plan", filename="problem.py")
    plan = memory.plan_trial(problem, [])
    assert plan.input_bytes == plan.output_bytes == 128 * 256 * 4 and plan.parameter_bytes == 0
    assert memory.refusal(plan, 10 * 1024**3, "GPU") is None
    message = memory.refusal(plan, 1024, "GPU") or ""
    assert message.startswith("problem too large for this GPU: one trial needs") and "GiB free" in message
    assert "outputs 0.00 GiB" in message


def test_channel_bounds_messages_and_descriptors() -> None:
    left, right = socket.socketpair()
    a, b = Channel(left), Channel(right)
    try:
        a.send({"op": "ready"})
        assert b.recv(5) == ({"op": "ready"}, [])
        r, w = os.pipe()
        a.send({"op": "outputs"}, [r])
        message, fds = b.recv(5)
        assert message == {"op": "outputs"} and len(fds) == 1
        os.close(fds[0])
        with pytest.raises(TimeoutError):
            b.recv(0.05)
        left.sendall(b"[1, 2]\n")
        with pytest.raises(ChannelError, match="not a JSON object"):
            b.recv(5)
        flood = threading.Thread(target=left.sendall, args=(b"x" * (MAX_MESSAGE + 70_000),), daemon=True)
        flood.start()  # the reader stops at the bound; the writer then blocks on a full socket
        with pytest.raises(ChannelError, match="longer than"):
            b.recv(5)
        os.close(r)
        os.close(w)
        left.close()
        with pytest.raises(ChannelClosed):
            Channel(right).recv(5)
    finally:
        right.close()


def test_cpu_shared_buffer_is_sealed_and_bounded() -> None:
    """The reference's memfd cannot be shrunk by the candidate (which would fault the reference's mapping), and
    views never reach outside it."""
    owner = SharedBuffer.create("cpu", 4096)
    importer = SharedBuffer.attach("cpu", os.dup(owner.fd), 4096)
    try:
        importer.view(256, (4,), torch.float32).copy_(torch.arange(4.0))
        assert owner.view(256, (4,), torch.float32).tolist() == [0.0, 1.0, 2.0, 3.0]
        with pytest.raises(PermissionError):
            os.ftruncate(owner.fd, 16)
        with pytest.raises(SharedBufferError):
            owner.view(4096 - 8, (4,), torch.float32)
        with pytest.raises(SharedBufferError):
            SharedBuffer.attach("cpu", os.dup(owner.fd), 8192)
    finally:
        importer.close()
        owner.close()


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


def test_a_timed_call_missing_the_tolerance_by_rounding_is_incorrect_and_a_replay_a_hack() -> None:
    """A failed spot check within SPOT_NEAR_MISS of the trials' worst error is the candidate's rounding on other
    inputs; one where the trials were exact (a replay computes them), or of another shape, is a hack."""

    def compared(error: float) -> Compared:
        return Compared(
            passed=False, failures=[f"output 0: max abs error {error}"], max_abs_error=error, fingerprint=[]
        )

    rounding = Trials()
    rounding.max_abs_error = 1e-4
    rounding.record_spot(3, compared(4.7e-4))
    rounding.record_spot(5, Compared(passed=True, failures=[], max_abs_error=2e-5, fingerprint=[]))
    assert rounding.spot_near_miss() and rounding.spot_failures == ["timed call 3: output 0: max abs error 0.00047"]
    rounding.record_spot(6, compared(SPOT_NEAR_MISS * 1e-4 * 1.5))
    assert not rounding.spot_near_miss()
    replay = Trials()
    replay.max_abs_error = 0.0
    replay.record_spot(2, compared(1e-3))
    assert not replay.spot_near_miss()
    reshaped = Trials()
    reshaped.max_abs_error = 1e-4
    reshaped.record_spot(2, None)
    assert not reshaped.spot_near_miss() and reshaped.spot_failures == [
        "timed call 2: outputs of another shape or dtype"
    ]
