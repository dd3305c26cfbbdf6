"""What the parent tells an evaluation child (job.json) and what the child reports back (result.json).

The child's report is untrusted: the candidate ran in that process. The parent validates it against these
models, loads tensors with ``weights_only=True`` and compares outputs itself.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["reference", "candidate", "profile"]
ChildStatus = Literal["ok", "problem_error", "candidate_error", "runtime_error", "illegal_access", "out_of_memory"]
JOB_FILE = "job.json"
RESULT_FILE = "result.json"
REFERENCE_DONE_FILE = "reference_done"
OUTPUTS_FILE = "outputs.pt"
PROBLEM_FILE = "problem.py"
# Messages of CUDA faults that poison the context; the child must die, the next evaluation starts clean.
STICKY_CUDA_ERRORS = (
    "illegal memory access",
    "misaligned address",
    "illegal instruction",
    "unspecified launch failure",
    "device-side assert",
    "an illegal",
)


class TimingPlan(BaseModel):
    base_seed: int = Field(description="Seed of the base inputs; every timed call gets them scaled afresh.")
    scale_seed: int = Field(description="Seed of the per-call scale factors in [0.99, 1).")
    warmup: int
    trials: int
    spot_indices: list[int] = Field(default_factory=list, description="Timed calls whose outputs are returned.")
    budget_s: float = Field(30.0, description="Stop timing early after this long (at least 10 trials run).")


class ChildJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role
    device: Literal["cuda", "cpu"]
    seeds: list[int]
    timing: TimingPlan | None = None
    baselines: list[Literal["eager", "compile"]] = Field(default_factory=list)
    candidate_file: str = "model_new.py"
    project_form: bool = False
    allow_torch_compute: bool = False
    memory_fraction: float = 0.9
    protected_files: list[str] = Field(default_factory=list)
    start_timing_after: str | None = Field(None, description="File in the workdir whose existence starts timing.")
    env: dict[str, str] = Field(default_factory=dict, description="Set before the candidate loads (artifact paths).")


class ChildTimings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Literal["cuda_events", "perf_counter"]
    samples_ms: list[float]
    host_samples_ms: list[float] = Field(default_factory=list)


class ChildReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role
    status: ChildStatus
    message: str = ""
    phases: dict[str, float] = Field(
        default_factory=dict, description="Phase -> Unix time it ended; diagnostics only, never a verdict input."
    )
    findings: list[tuple[str, str]] = Field(default_factory=list)
    input_signature: list[str] = Field(default_factory=list)
    output_aliases_input: bool = False
    trials_run: int = 0
    timings: dict[str, ChildTimings] = Field(default_factory=dict)
    baseline_notes: dict[str, str] = Field(default_factory=dict)
    launch_count: int | None = None
    kernels: dict[str, float] = Field(default_factory=dict, description="GPU kernel name -> time (us) in one call.")
    custom_kernel_time_share: float | None = None
    custom_kernel_time_method: Literal["profiler", "launcher_events"] | None = None
    torch_version: str = ""
    cuda_version: str | None = None
    gpu_name: str | None = None


# Substrings of kernel names that belong to PyTorch or vendor libraries; any other kernel counts as the
# candidate's own (custom-kernel share of GPU time, and which kernels the profiler reports on).
LIBRARY_KERNEL_MARKERS = (
    "at::native",
    "at_cuda_detail",
    "cublas",
    "cudnn",
    "nvjet",
    "xmma",
    "gemv",
    "sgemm",
    "hgemm",
    "cutlass_80",
    "cutlass_90",
    "triton_",
    "Memcpy",
)
