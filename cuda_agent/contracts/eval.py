"""Contracts of eval_svc: verdicts, timings and the reward."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from cuda_agent.contracts.common import Device, EvalStatus, TolerancePreset
from cuda_agent.contracts.compile import CandidateSource


class EvalRequest(BaseModel):
    problem_source: str = Field(description="KernelBench problem file: Model, get_inputs, get_init_inputs.")
    candidate: CandidateSource
    artifact_key: str | None = Field(None, description="Compiled artifact of the candidate (compile_svc).")
    device: Device = Device.CUDA
    tolerance: TolerancePreset = TolerancePreset.KERNELBENCH
    correctness_trials: int = Field(5, ge=1)
    timing_trials: int = Field(100, ge=1)
    warmup: int = Field(10, ge=0)
    measure_baselines: bool = Field(True, description="Time eager and torch.compile baselines (cached).")
    allow_torch_compute: bool = Field(False, description="The problem allows PyTorch compute in forward.")
    timeout_s: float | None = Field(
        None, gt=0, description="Wall-clock limit per child; None: settings.eval_timeout_s."
    )


class Finding(BaseModel):
    code: str = Field(description="Stable name, e.g. torch_compute_in_forward, output_cached.")
    message: str


class TimingStats(BaseModel):
    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    trials: int
    samples_ms: list[float] = Field(default_factory=list)
    host_samples_ms: list[float] = Field(
        default_factory=list, description="Host clock of each timed call (GPU: less the queued flush and busy-wait)."
    )


class Fingerprint(BaseModel):
    device: Device
    gpu_name: str | None = None
    sm_clock_start_mhz: int | None = None
    sm_clock_end_mhz: int | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str
    python: str
    tolerance: TolerancePreset
    harness_version: str
    host: str | None = None


class EvalResult(BaseModel):
    status: EvalStatus
    correct: bool
    reward: float | None = Field(description="-1 incorrect, 1/2/3 by speed; None on sandbox_error (no verdict).")
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    continuous_speedup: float | None = Field(None, description="Geometric mean of both speedups, for research.")
    candidate_timing: TimingStats | None = None
    eager_timing: TimingStats | None = None
    compile_timing: TimingStats | None = None
    custom_kernel_time_share: float | None = Field(None, description="Share of GPU time in custom kernels.")
    custom_kernel_time_method: Literal["profiler", "launcher_events"] | None = Field(
        None,
        description="profiler: kernel records of the PyTorch profiler; launcher_events: CUDA events around each "
        "custom launcher or extension-function call (where the profiler records no GPU activity; library calls "
        "inside them count).",
    )
    findings: list[Finding] = Field(default_factory=list)
    max_abs_error: float | None = None
    trials_passed: int = 0
    trials_run: int = 0
    message: str = ""
    fingerprint: Fingerprint | None = None
    duration_s: float = 0.0
    fault: Literal["candidate", "problem", "infrastructure"] | None = Field(
        None, description="Who is to blame when there is no success: never the candidate when reward is None."
    )
    notes: list[str] = Field(default_factory=list, description="Non-verdict remarks: missing baselines, GPU health.")
    timeline_s: dict[str, float] = Field(
        default_factory=dict,
        description="Where the time went: event -> seconds since the evaluation started ('candidate.timing', ...). "
        "Child events are reported by the children themselves: diagnostics, never verdict inputs.",
    )


class ProfileRequest(BaseModel):
    problem_source: str
    candidate: CandidateSource
    artifact_key: str | None = None


class KernelProfile(BaseModel):
    kernel: str
    duration_us: float | None = None
    achieved_occupancy_pct: float | None = None
    dram_throughput_pct: float | None = None
    sm_efficiency_pct: float | None = None
    l2_hit_rate_pct: float | None = None
    registers_per_thread: int | None = None
    block_size: int | None = None
    threads_per_warp_inst: float | None = Field(
        None, description="Active threads per warp instruction; 32: no divergence."
    )


class ProfileResult(BaseModel):
    ok: bool
    kernels: list[KernelProfile] = Field(default_factory=list)
    checklist: list[str] = Field(default_factory=list, description="Verdicts with fixes, one per line.")
    report: str = Field("", description="Compact text an agent can read.")
    message: str = ""
