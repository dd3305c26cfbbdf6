"""`cuda-agent doctor`: one line per dependency of the platform, each ok or with the reason it is not."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.settings import ConfigError, get_settings


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    required: bool = True


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout


def check_nvcc() -> Check:
    from cuda_agent.compile.toolchain import nvcc_path, nvcc_version

    if not nvcc_path().exists():
        return Check("nvcc", False, f"not found at {nvcc_path()}: install the CUDA toolkit or set CUDA_HOME", False)
    return Check("nvcc", True, f"{nvcc_path()}: {nvcc_version()}", required=False)


def check_compiler() -> Check:
    gxx = shutil.which("g++")
    if gxx is None:
        return Check("g++", False, "not found: CPU candidates and torch extensions need a C++ compiler")
    return Check("g++", True, _run([gxx, "--version"]).splitlines()[0])


def check_torch() -> Check:
    try:
        import torch
    except ImportError:
        return Check("torch", False, "not installed: pip install torch")
    return Check("torch", True, f"{torch.__version__} (CUDA build {torch.version.cuda or 'none'})")


def check_gpu() -> Check:
    from cuda_agent.gpu import discover_gpus, discovery_error

    gpus = discover_gpus()
    if not gpus:
        return Check("gpu", False, f"no GPU: {discovery_error() or 'NVML reports none'}", required=False)
    listing = "; ".join(f"[{g.index}] {g.name} {g.memory_total_bytes // 2**20} MiB" for g in gpus)
    return Check("gpu", True, listing, required=False)


def check_db() -> Check:
    from cuda_agent.db import check_database

    try:
        check_database()
    except ConfigError as exc:
        return Check("database", False, str(exc))
    return Check("database", True, get_settings().sqlalchemy_url.split("@")[-1])


def check_redis() -> Check:
    from cuda_agent.api.readiness import check_broker

    settings = get_settings()
    if settings.redis_url is None:
        return Check("broker", True, "embedded mode (no REDIS_URL): tasks run in-process", required=False)
    try:
        check_broker()
    except ConfigError as exc:
        return Check("broker", False, str(exc))
    return Check("broker", True, settings.redis_url)


def check_bwrap() -> Check:
    from cuda_agent.sandbox import sandbox_available

    ok, reason = sandbox_available()
    return Check("sandbox", ok, reason)


def check_quotas() -> Check:
    """Which mechanism bounds each resource of a sandbox run here: a memory cgroup where the host delegates one,
    the watchdog everywhere, the seccomp filter always."""
    from cuda_agent.sandbox import quota_mechanisms

    mechanisms = quota_mechanisms()
    return Check("sandbox quotas", True, "; ".join(f"{k}: {v}" for k, v in mechanisms.items()), required=False)


def check_bytecode() -> Check:
    """Evaluation children import torch read-only with bytecode writing off: without caches each one compiles
    torch and torch._dynamo again (seconds per evaluation child)."""
    import importlib.util

    missing = []
    for name in ("torch", "torch._dynamo"):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec else None
        if origin and origin.endswith(".py") and not Path(importlib.util.cache_from_source(origin)).exists():
            missing.append(name)
    if missing:
        detail = f"no bytecode cache for {', '.join(missing)}: run python scripts/compile_bytecode.py"
        return Check("bytecode", False, detail, required=False)
    return Check("bytecode", True, "torch and torch._dynamo have bytecode caches", required=False)


# Inside the evaluation sandbox the PyTorch profiler should see GPU kernels: the custom-kernel share comes from it
# (launcher events stand in, for project-form candidates only). Prints the GPU kernel events of one elementwise op.
_PROFILER_PROBE = """
import torch
x = torch.ones(1 << 20, device="cuda")
with torch.autograd.profiler.profile(use_device="cuda") as prof:
    (x * 2).sum()
    torch.cuda.synchronize()
print(sum(e.device_type == torch.autograd.DeviceType.CUDA for e in prof.function_events))
"""


def check_gpu_profiler() -> Check:
    from cuda_agent.gpu import discover_gpus
    from cuda_agent.sandbox import SandboxLimits, SandboxSpec, run_sandboxed

    if not discover_gpus():
        return Check("gpu profiler", True, "no GPU: not applicable", required=False)
    result = run_sandboxed(
        SandboxSpec(
            argv=[sys.executable, "-c", _PROFILER_PROBE],
            cwd=Path("/tmp"),
            writable_paths=[],
            gpu=True,
            limits=SandboxLimits(wall_time_s=120, cpu_time_s=120, address_space_bytes=None, max_processes=1024),
        )
    )
    kernels = result.stdout.strip().splitlines()[-1:] or ["?"]
    if not result.ok or kernels[0] in ("0", "?"):
        tail = " | ".join((result.sandbox_error or result.stderr).strip().splitlines()[-4:])[-500:]
        detail = (
            f"the PyTorch profiler recorded no GPU kernels in the sandbox ({kernels[0]}; CUPTI gives none on some "
            f"hosts): custom-kernel shares come from launcher events, project form only. {tail}"
        )
        return Check("gpu profiler", False, detail.strip(), False)
    return Check("gpu profiler", True, f"{kernels[0]} GPU kernel events recorded in the sandbox", required=False)


CHECKS: list[Callable[[], Check]] = [
    check_torch,
    check_compiler,
    check_nvcc,
    check_gpu,
    check_db,
    check_redis,
    check_bwrap,
    check_quotas,
    check_bytecode,
    check_gpu_profiler,
]


def run_checks() -> list[Check]:
    results = []
    for check in CHECKS:
        try:
            results.append(check())
        except Exception as exc:  # a broken check is reported, never a traceback for the operator
            results.append(Check(check.__name__.removeprefix("check_"), False, f"{type(exc).__name__}: {exc}"))
    return results
