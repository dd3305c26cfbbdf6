"""GPU discovery and health through NVML (nvidia-ml-py), used to pin workers and to vet a GPU before timing.

Indices are NVML indices, which follow PCI bus order; children are started with CUDA_DEVICE_ORDER=PCI_BUS_ID
so the same number means the same device to CUDA.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, Field

# Throttle reasons that distort timings; idle and application-clock settings are normal.
_THROTTLE_NAMES = {
    "nvmlClocksThrottleReasonSwPowerCap": "sw_power_cap",
    "nvmlClocksThrottleReasonHwSlowdown": "hw_slowdown",
    "nvmlClocksThrottleReasonSwThermalSlowdown": "sw_thermal_slowdown",
    "nvmlClocksThrottleReasonHwThermalSlowdown": "hw_thermal_slowdown",
    "nvmlClocksThrottleReasonHwPowerBrakeSlowdown": "hw_power_brake",
    "nvmlClocksThrottleReasonSyncBoost": "sync_boost",
}
HOT_TEMPERATURE_C = 85


class GpuInfo(BaseModel):
    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    compute_capability: tuple[int, int] | None = None
    driver: str
    cuda_driver: str | None = Field(None, description="Highest CUDA version the driver supports, e.g. 13.0.")
    pci_bus_id: str | None = None


class GpuHealth(BaseModel):
    index: int
    ok: bool
    temperature_c: int | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    memory_used_bytes: int | None = None
    other_processes: list[int] = Field(default_factory=list, description="PIDs of compute processes on the GPU.")
    throttle_reasons: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list, description="Why the GPU is not fit for timing now.")


class NvmlUnavailable(RuntimeError):
    """No NVML: no driver, no library, or no device. The message says which."""


def _nvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise NvmlUnavailable(f"nvidia-ml-py is not installed: {exc}") from None
    return pynvml


@contextlib.contextmanager
def _session() -> Iterator[Any]:
    nvml = _nvml()
    try:
        nvml.nvmlInit()
    except Exception as exc:
        raise NvmlUnavailable(f"NVML init failed (no NVIDIA driver?): {exc}") from None
    try:
        yield nvml
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(raw: int) -> str:
    return f"{raw // 1000}.{(raw % 1000) // 10}"


def discover_gpus() -> list[GpuInfo]:
    """Every GPU NVML sees; [] when there is no driver (see ``discovery_error`` for the reason)."""
    try:
        return _discover()
    except NvmlUnavailable:
        return []


def discovery_error() -> str | None:
    """Why ``discover_gpus`` finds nothing, or None when NVML works."""
    try:
        with _session():
            return None
    except NvmlUnavailable as exc:
        return str(exc)


def _discover() -> list[GpuInfo]:
    with _session() as nvml:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        try:
            cuda_driver: str | None = _cuda_version(nvml.nvmlSystemGetCudaDriverVersion())
        except Exception:
            cuda_driver = None
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
                capability: tuple[int, int] | None = (int(major), int(minor))
            except Exception:
                capability = None
            try:
                bus_id: str | None = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            except Exception:
                bus_id = None
            gpus.append(
                GpuInfo(
                    index=index,
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    memory_total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                    compute_capability=capability,
                    driver=driver,
                    cuda_driver=cuda_driver,
                    pci_bus_id=bus_id,
                )
            )
        return gpus


def gpu_health(index: int, own_pids: frozenset[int] = frozenset()) -> GpuHealth:
    """Health of one GPU before timing: foreign compute processes, temperature, throttling, SM clock."""
    try:
        with _session() as nvml:
            return _health(nvml, index, own_pids)
    except NvmlUnavailable as exc:
        return GpuHealth(index=index, ok=False, problems=[str(exc)])


def _health(nvml: Any, index: int, own_pids: frozenset[int]) -> GpuHealth:
    count = nvml.nvmlDeviceGetCount()
    if not 0 <= index < count:
        return GpuHealth(index=index, ok=False, problems=[f"no GPU with NVML index {index} ({count} present)"])
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    health = GpuHealth(index=index, ok=True)
    problems = health.problems
    with contextlib.suppress(Exception):
        health.temperature_c = int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    with contextlib.suppress(Exception):
        health.sm_clock_mhz = int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
    with contextlib.suppress(Exception):
        health.sm_clock_max_mhz = int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
    with contextlib.suppress(Exception):
        health.memory_used_bytes = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
    with contextlib.suppress(Exception):
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        health.other_processes = sorted(int(p.pid) for p in procs if int(p.pid) not in own_pids)
    with contextlib.suppress(Exception):
        mask = int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
        health.throttle_reasons = sorted(
            label for attr, label in _THROTTLE_NAMES.items() if hasattr(nvml, attr) and mask & int(getattr(nvml, attr))
        )
    if health.other_processes:
        problems.append(f"other compute processes on GPU {index}: {health.other_processes}")
    if health.temperature_c is not None and health.temperature_c >= HOT_TEMPERATURE_C:
        problems.append(f"GPU {index} is hot: {health.temperature_c} C")
    thermal = [r for r in health.throttle_reasons if r != "sync_boost"]
    if thermal:
        problems.append(f"GPU {index} is throttled: {', '.join(thermal)}")
    health.ok = not problems
    return health


def select_gpu(preferred: int | None = None) -> GpuInfo | None:
    """The GPU to pin to: ``preferred`` (e.g. settings.gpu_index) when it exists, else the first healthy one,
    else the first one; None without GPUs."""
    gpus = discover_gpus()
    if not gpus:
        return None
    if preferred is not None:
        for gpu in gpus:
            if gpu.index == preferred:
                return gpu
        raise ValueError(f"no GPU with NVML index {preferred} ({len(gpus)} present)")
    for gpu in gpus:
        if gpu_health(gpu.index).ok:
            return gpu
    return gpus[0]


@functools.cache
def gpu_by_index(index: int) -> GpuInfo | None:
    """Cached static info of one GPU (name, driver) for fingerprints."""
    return next((g for g in discover_gpus() if g.index == index), None)
