"""NVML discovery and health. NVML itself is faked at its boundary (the pynvml functions) for several devices;
the real call runs under the gpu marker."""

from __future__ import annotations

import types
from typing import Any

import pytest

from cuda_agent import gpu


class FakeNvml:
    """Two H200s; GPU 1 is hot, throttled and shared with a foreign process."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    nvmlClocksThrottleReasonSwThermalSlowdown = 0x20
    nvmlClocksThrottleReasonSwPowerCap = 0x4

    def __init__(self) -> None:
        self.shutdowns = 0

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"580.65"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return types.SimpleNamespace(total=141 * 1024**3, used=(0, 40 * 1024**3)[h])

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return types.SimpleNamespace(busId=f"00000000:{h + 0x18:02X}:00.0".encode())

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return (45, 90)[h]

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return (1980, 1200)[h]

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        return 1980

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [types.SimpleNamespace(pid=4242)] if h == 1 else []

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return (0, 0x24)[h]


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml()
    monkeypatch.setattr(gpu, "_nvml", lambda: fake)
    gpu.gpu_by_index.cache_clear()
    return fake


def test_discovers_every_device(fake_nvml: FakeNvml) -> None:
    found = gpu.discover_gpus()
    assert [g.index for g in found] == [0, 1]
    assert found[0].name == "NVIDIA H200" and found[0].driver == "580.65" and found[0].cuda_driver == "13.0"
    assert found[1].compute_capability == (9, 0) and found[1].pci_bus_id == "00000000:19:00.0"
    assert fake_nvml.shutdowns == 1


def test_health_reports_foreign_processes_heat_and_throttling(fake_nvml: FakeNvml) -> None:
    assert gpu.gpu_health(0).ok
    sick = gpu.gpu_health(1)
    assert not sick.ok
    assert sick.other_processes == [4242] and sick.temperature_c == 90 and sick.sm_clock_mhz == 1200
    assert sick.throttle_reasons == ["sw_power_cap", "sw_thermal_slowdown"]
    assert len(sick.problems) == 3
    assert gpu.gpu_health(1, own_pids=frozenset({4242})).other_processes == []
    assert "no GPU with NVML index 5" in gpu.gpu_health(5).problems[0]


def test_select_gpu_prefers_pinned_then_healthy(fake_nvml: FakeNvml) -> None:
    assert gpu.select_gpu(1).index == 1  # type: ignore[union-attr]
    assert gpu.select_gpu().index == 0  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="no GPU with NVML index 7"):
        gpu.select_gpu(7)


def test_no_driver_gives_empty_list_with_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setattr(gpu, "_nvml", lambda: NoDriver())
    assert gpu.discover_gpus() == []
    assert "NVML init failed" in (gpu.discovery_error() or "")
    assert gpu.select_gpu() is None
    assert not gpu.gpu_health(0).ok


@pytest.mark.gpu
def test_real_nvml_sees_the_gpu() -> None:
    gpu.gpu_by_index.cache_clear()
    found = gpu.discover_gpus()
    assert found, gpu.discovery_error()
    health = gpu.gpu_health(found[0].index)
    assert health.sm_clock_mhz and health.temperature_c is not None
