"""Real nvcc/g++ builds in the real sandbox."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cuda_agent.compile import (
    artifact_dir,
    classify,
    compile_candidate,
    has_artifact,
    materialize_artifact,
    pack_artifact,
    unpack_artifact,
)
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.contracts.common import CompileStatus, Device
from cuda_agent.contracts.compile import CompileRequest
from cuda_agent.sandbox import SandboxLimits, SandboxSpec, run_sandboxed
from cuda_agent.settings import get_settings
from tests.conftest import sleep_marker

pytestmark = pytest.mark.sandbox

ADD_CU = """#include <cuda_runtime.h>

__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" void add(const float* a, const float* b, float* c, int n, cudaStream_t stream) {
  add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n);
}
"""
SCALE_CPP = """#include <cstdint>

extern "C" void scale_add(const float* x, float* y, float a, int64_t n) {
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + 1.0f;
}
"""
MODEL_NEW = "from cuda_agent.kernels import load_kernels\n"


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("CUDA_AGENT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda")
    get_settings.cache_clear()
    yield tmp_path / "data"
    get_settings.cache_clear()


def project(
    device: Device = Device.CUDA, flags: list[str] | None = None, timeout_s: float | None = None, **kernels: str
) -> CompileRequest:
    files = {"model_new.py": MODEL_NEW, **{f"kernels/{k.replace('_DOT_', '.')}": v for k, v in kernels.items()}}
    return CompileRequest(
        candidate=CandidateSource(form=CandidateForm.PROJECT, files=files),
        device=device,
        extra_flags=flags or [],
        timeout_s=timeout_s,
    )


def kernelbench(source: str, device: Device = Device.CPU, timeout_s: float | None = None) -> CompileRequest:
    candidate = CandidateSource(form=CandidateForm.KERNELBENCH, files={"model_new.py": source})
    return CompileRequest(candidate=candidate, device=device, timeout_s=timeout_s)


def test_cuda_success_resources_and_cache_hit() -> None:
    r = compile_candidate(project(add_DOT_cu=ADD_CU))
    assert r.status is CompileStatus.OK, r.message
    assert r.artifact_key == r.cache_key and not r.cache_hit
    assert [k.kernel for k in r.resources] == ["add_kernel"]
    res = r.resources[0]
    assert res.registers and res.registers > 0 and res.shared_bytes == 0 and res.spill_stores_bytes == 0
    manifest = (artifact_dir(r.cache_key) / "kernels" / "manifest.json").read_text()
    assert '"cudaStream_t"' in manifest and '"float32"' in manifest

    t0 = time.monotonic()
    hit = compile_candidate(project(add_DOT_cu=ADD_CU.replace("\n", "\r\n")))  # normalized: same key
    assert time.monotonic() - t0 <= 0.1
    assert hit.cache_hit and hit.cache_key == r.cache_key and hit.status is CompileStatus.OK


def test_model_new_edit_reuses_objects(data_dir: Path) -> None:
    first = compile_candidate(project(add_DOT_cu=ADD_CU))
    req = project(add_DOT_cu=ADD_CU)
    req.candidate.files["model_new.py"] += "# edited\n"
    second = compile_candidate(req)
    assert second.status is CompileStatus.OK and not second.cache_hit and second.cache_key != first.cache_key
    assert len(list((data_dir / "compile_cache" / "objects").glob("*.o"))) == 1  # only relinked
    assert second.resources == first.resources


def test_cpu_candidate_compiles_loads_and_runs() -> None:
    import torch

    from cuda_agent.kernels import KernelsError, launch_count, load_kernels

    r = compile_candidate(project(device=Device.CPU, s_DOT_cpp=SCALE_CPP))
    assert r.status is CompileStatus.OK, r.log
    lib = load_kernels(artifact_dir(r.cache_key) / "kernels")
    x = torch.arange(1000, dtype=torch.float32)
    y = torch.empty_like(x)
    before = launch_count()
    lib.scale_add(x, y, 3.0, x.numel())
    assert launch_count() == before + 1
    torch.testing.assert_close(y, 3.0 * x + 1.0)
    with pytest.raises(KernelsError, match=r"dtype is torch\.float64"):
        lib.scale_add(x.double(), y, 3.0, x.numel())
    with pytest.raises(KernelsError, match="not contiguous"):
        lib.scale_add(x[::2], y[:500], 3.0, 500)
    with pytest.raises(KernelsError, match="expected an int"):
        lib.scale_add(x, y, 3.0, 1000.0)


def test_cpu_candidate_runs_in_sandbox_via_materialize(tmp_path: Path) -> None:
    r = compile_candidate(project(device=Device.CPU, s_DOT_cpp=SCALE_CPP))
    work = tmp_path / "eval"
    runtime = materialize_artifact(r.cache_key, work)
    code = (
        "import torch\nfrom cuda_agent.kernels import load_kernels, launch_count\n"
        "x = torch.ones(8); y = torch.empty(8); load_kernels().scale_add(x, y, 2.0, 8)\n"
        "print(y.sum().item(), launch_count())\n"
    )
    spec = SandboxSpec(
        argv=[sys.executable, "-c", code],
        cwd=work,
        writable_paths=[work],
        env=runtime.env,
        limits=SandboxLimits(address_space_bytes=None, wall_time_s=120),
    )
    out = run_sandboxed(spec)
    assert out.stdout.split() == ["24.0", "1"], out.stderr


def test_syntax_error_reports_file_and_line() -> None:
    bad = ADD_CU.replace("if (i < n) c[i] = a[i] + b[i];", "if (i < n) c[i] = a[i] + undefined_thing;")
    r = compile_candidate(project(add_DOT_cu=bad))
    assert r.status is CompileStatus.COMPILE_ERROR
    d = r.diagnostics[0]
    assert (d.file, d.line) == ("kernels/add.cu", 5) and "undefined_thing" in d.message
    assert r.message.startswith("kernels/add.cu:5:")
    assert r.artifact_key is None and not has_artifact(r.cache_key)


def test_cpp_syntax_error_has_column() -> None:
    r = compile_candidate(project(device=Device.CPU, s_DOT_cpp=SCALE_CPP.replace("+ 1.0f;", "+ 1.0f")))
    assert r.status is CompileStatus.COMPILE_ERROR
    d = r.diagnostics[0]
    assert d.file == "kernels/s.cpp" and d.line in (5, 6) and d.column is not None


def test_arch_mismatch_named() -> None:
    wgmma = ADD_CU.replace("if (i < n)", 'asm volatile("wgmma.fence.sync.aligned;" ::: "memory");\n  if (i < n)')
    r = compile_candidate(project(add_DOT_cu=wgmma, flags=["-arch=sm_90"]))
    assert r.status is CompileStatus.COMPILE_ERROR
    assert any(d.code == "arch_mismatch" and "sm_90a" in (d.hint or "") for d in r.diagnostics), r.diagnostics
    fixed = compile_candidate(project(add_DOT_cu=wgmma, flags=["-arch=sm_90a"]))
    assert fixed.status is CompileStatus.OK, fixed.message


def test_builds_take_the_gpus_arch_specific_instructions_by_default() -> None:
    """No arch asked for (none configured, none detected here): Hopper's, with its arch-specific instructions, so a
    candidate's wgmma builds as it would on the H100 or H200 it runs on."""
    wgmma = ADD_CU.replace("if (i < n)", 'asm volatile("wgmma.fence.sync.aligned;" ::: "memory");\n  if (i < n)')
    r = compile_candidate(project(add_DOT_cu=wgmma))
    assert r.status is CompileStatus.OK, r.message


def test_smem_overflow_named() -> None:
    # 240 KB: over every target's static cap (48 KB for sm_90, 227 KB for sm_90a, the default)
    big = ADD_CU.replace("int i =", "__shared__ float tile[60000];\n  tile[threadIdx.x] = a[0];\n  int i =")
    big = big.replace("c[i] = a[i] + b[i];", "c[i] = tile[threadIdx.x + 1] + b[i];")
    r = compile_candidate(project(add_DOT_cu=big))
    assert r.status is CompileStatus.COMPILE_ERROR
    assert r.diagnostics[0].code == "smem_overflow" and "cudaFuncSetAttribute" in (r.diagnostics[0].hint or "")


def test_undefined_symbol_at_link() -> None:
    src = 'extern "C" void helper(float* x);\nextern "C" void run(float* x) { helper(x); }\n'
    r = compile_candidate(project(device=Device.CPU, r_DOT_cpp=src))
    assert r.status is CompileStatus.COMPILE_ERROR
    assert any(d.code == "undefined_symbol" and "helper" in d.message for d in r.diagnostics), r.diagnostics


def test_prototype_rules_enforced() -> None:
    src = '#include <vector>\nextern "C" void f(std::vector<int> v) {}\n'
    r = compile_candidate(project(device=Device.CPU, f_DOT_cpp=src))
    assert r.status is CompileStatus.COMPILE_ERROR and r.diagnostics[0].code == "bad_prototype"
    assert r.diagnostics[0].line == 2
    r = compile_candidate(project(device=Device.CPU, f_DOT_cpp="static void g() {}\n"))
    assert "no exported launcher" in r.message


def test_bad_flag_and_layout_refused() -> None:
    r = compile_candidate(project(add_DOT_cu=ADD_CU, flags=["-o", "/etc/x"]))
    assert r.status is CompileStatus.COMPILE_ERROR and "'-o' is not allowed" in r.message
    r = compile_candidate(project(add_DOT_cu=ADD_CU, flags=["-include/etc/passwd"]))
    assert "not allowed" in r.message
    req = project(add_DOT_cu=ADD_CU)
    req.candidate.files["../escape.cu"] = ADD_CU
    assert "without '..'" in compile_candidate(req).message


def test_include_of_dev_zero_refused() -> None:
    r = compile_candidate(project(device=Device.CPU, z_DOT_cpp="#include </dev/zero>\n" + SCALE_CPP))
    assert r.status is CompileStatus.COMPILE_ERROR and r.diagnostics[0].code == "forbidden_include"


def test_template_bomb_is_contained() -> None:
    # Exponential template instantiation: cc1plus must hit a sandbox limit or the timeout, never hang the host.
    bomb = (
        "template <int N> struct B { static constexpr long v = B<N - 1>::v + B<N - 2>::v + 1; };\n"
        "template <> struct B<0> { static constexpr long v = 1; };\n"
        "template <> struct B<1> { static constexpr long v = 1; };\n"
        'extern "C" long long f() { return 0; }\n'
        "long long g() { return B<100000>::v; }\n"
        'extern "C" void run(float* x) { x[0] = (float)g(); }\n'
    )
    r = compile_candidate(project(device=Device.CPU, timeout_s=20, b_DOT_cpp=bomb))
    assert r.status in (CompileStatus.COMPILE_ERROR, CompileStatus.TIMEOUT), r.message


def test_build_cannot_open_network_socket() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    try:
        port = server.getsockname()[1]
        r = compile_candidate(kernelbench(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 3)\n"))
        assert r.status is CompileStatus.COMPILE_ERROR
        assert "ConnectionRefusedError" in r.message or "OSError" in r.message or "Network" in r.message, r.message
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


def test_build_cannot_write_outside_scratch(data_dir: Path) -> None:
    target = data_dir / "artifacts" / "pwned"
    target.parent.mkdir(parents=True, exist_ok=True)
    r = compile_candidate(kernelbench(f"open({str(target)!r}, 'w').write('x')\n"))
    assert r.status is CompileStatus.COMPILE_ERROR and "Error" in r.message
    assert not target.exists()
    r = compile_candidate(kernelbench(f"open({str(Path(sys.prefix) / 'pwned')!r}, 'w').write('x')\n"))
    assert r.status is CompileStatus.COMPILE_ERROR and not (Path(sys.prefix) / "pwned").exists()


def test_build_fork_bomb_contained() -> None:
    bomb = "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(60)\n"
    t0 = time.monotonic()
    r = compile_candidate(kernelbench(bomb, timeout_s=30))
    assert r.status is CompileStatus.COMPILE_ERROR, r.message
    assert "BlockingIOError" in r.message or r.diagnostics[0].code == "resource_limit"
    assert time.monotonic() - t0 < 30


def test_build_unbounded_allocation_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    # A 1 GiB address-space limit is reached in a second; the default 8 GiB takes tens of seconds of paging.
    monkeypatch.setenv("CUDA_AGENT_COMPILE_MEMORY_BYTES", str(1024**3))
    get_settings.cache_clear()
    r = compile_candidate(kernelbench("x = []\nwhile True:\n    x.append(bytearray(256 * 1024 * 1024))\n"))
    assert r.status is CompileStatus.COMPILE_ERROR
    assert r.diagnostics[0].code == "resource_limit" and "MemoryError" in r.message


def test_build_timeout_kills_process_group() -> None:
    marker = sleep_marker()
    src = f"import os, time\nos.system('sleep {marker} &')\ntime.sleep(600)\n"
    t0 = time.monotonic()
    r = compile_candidate(kernelbench(src, timeout_s=2))
    assert r.status is CompileStatus.TIMEOUT and time.monotonic() - t0 < 15
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and marker.encode() in _cmdline(p)]
    assert leftovers == []


def _cmdline(p: Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


def test_pack_unpack_roundtrip(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = compile_candidate(project(device=Device.CPU, s_DOT_cpp=SCALE_CPP))
    blob = pack_artifact(r.cache_key)
    monkeypatch.setenv("CUDA_AGENT_DATA_DIR", str(tmp_path / "other"))
    get_settings.cache_clear()
    assert not has_artifact(r.cache_key)
    path = unpack_artifact(r.cache_key, blob)
    assert (path / "kernels" / "libkernels.so").is_file() and has_artifact(r.cache_key)


def test_runtime_errors_classified() -> None:
    assert classify("CUDA error: too many resources requested for launch")[0] == "too_many_resources"
    assert classify("OSError: libkernels.so: undefined symbol: foo")[0] == "undefined_symbol"


@pytest.mark.slow
def test_kernelbench_load_inline_build_then_hit_then_no_rebuild(tmp_path: Path) -> None:
    src = (
        "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
        "cpp = 'torch::Tensor twice(torch::Tensor x) { return x * 2; }'\n"
        "ext = load_inline(name='twice_ext', cpp_sources=cpp, functions=['twice'])\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return ext.twice(x)\n"
    )
    r = compile_candidate(kernelbench(src))
    assert r.status is CompileStatus.OK, r.log[-3000:]
    assert "twice_ext" in r.message
    t0 = time.monotonic()
    assert compile_candidate(kernelbench(src)).cache_hit and time.monotonic() - t0 <= 0.1

    # The eval side: a writable copy at the build's sandbox path loads without invoking the compiler again.
    work = tmp_path / "eval"
    runtime = materialize_artifact(r.cache_key, work)
    (work / "model_new.py").write_text(src)
    so = next((work / "torch_extensions").rglob("*.so"))
    mtime = so.stat().st_mtime_ns
    code = "import torch, model_new\nprint(model_new.ModelNew()(torch.ones(3)).tolist())\n"
    spec = SandboxSpec(
        argv=[sys.executable, "-c", code],
        cwd=work,
        writable_paths=[work],
        env=runtime.env,
        extra_binds=runtime.extra_binds,
        limits=SandboxLimits(address_space_bytes=None, wall_time_s=300),
    )
    t0 = time.monotonic()
    out = run_sandboxed(spec)
    assert out.stdout.strip() == "[2.0, 2.0, 2.0]", out.stderr[-3000:]
    assert so.stat().st_mtime_ns == mtime and time.monotonic() - t0 < 60


@pytest.mark.gpu
@pytest.mark.skipif(not os.path.exists("/dev/nvidiactl"), reason="no NVIDIA GPU")
def test_cuda_artifact_loads_and_runs_on_gpu(tmp_path: Path) -> None:
    r = compile_candidate(project(add_DOT_cu=ADD_CU))
    assert r.status is CompileStatus.OK, r.message
    work = tmp_path / "eval"
    runtime = materialize_artifact(r.cache_key, work)
    code = (
        "import torch\nfrom cuda_agent.kernels import load_kernels, launch_count\n"
        "a = torch.randn(100000, device='cuda'); b = torch.randn_like(a); c = torch.empty_like(a)\n"
        "load_kernels().add(a, b, c, a.numel())\ntorch.cuda.synchronize()\n"
        "print(torch.allclose(c, a + b), launch_count())\n"
    )
    spec = SandboxSpec(
        argv=[sys.executable, "-c", code],
        cwd=work,
        writable_paths=[work],
        env=runtime.env,
        gpu=True,
        limits=SandboxLimits(address_space_bytes=None, wall_time_s=300),
    )
    out = run_sandboxed(spec)
    assert out.stdout.split() == ["True", "1"], out.stderr[-3000:]
