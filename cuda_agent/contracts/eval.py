"""Contracts of eval_svc: verdicts, timings and the reward."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from cuda_agent.contracts.candidate import CandidateForm, CandidateSource, RuleProfile, default_rules
from cuda_agent.contracts.common import MAX_SOURCE_CHARS, Device, EvalStatus, RequestModel, TolerancePreset

# A compiled artifact's content address (compile.store.check_key).
ARTIFACT_KEY_PATTERN = r"^[0-9a-f]{64}$"
# Trial counts and limits a tenant may ask for: enough for any measurement, bounded in memory and time (2e7
# trials once took an eval server from 0.6 to 2.4 GB).
MAX_CORRECTNESS_TRIALS = 100
MAX_TIMING_TRIALS = 10_000
MAX_WARMUP = 1_000
MAX_EVAL_TIMEOUT_S = 3600.0


class EvalOptions(BaseModel):
    """How a candidate is judged: declared once here, shared by an evaluation request and a rollout's config."""

    device: Device = Device.CUDA
    tolerance: TolerancePreset = TolerancePreset.KERNELBENCH
    correctness_trials: int = Field(5, ge=1, le=MAX_CORRECTNESS_TRIALS)
    timing_trials: int = Field(100, ge=1, le=MAX_TIMING_TRIALS)
    warmup: int = Field(10, ge=0, le=MAX_WARMUP)
    measure_baselines: bool = Field(True, description="Time eager and torch.compile baselines (cached).")
    allow_torch_compute: bool = Field(False, description="The problem allows PyTorch compute in forward.")
    rules: RuleProfile | None = Field(
        None,
        description="Rule profile; None: the candidate form's default (paper for workdir, standard otherwise). "
        "paper judges at the paper tolerance and forbids PyTorch compute.",
    )
    load_reference_state: bool | None = Field(
        None,
        description="Load the reference model's state_dict into ModelNew before judging it (strict: every key "
        "present, every shape equal), as the released CUDA Agent environment does. None: the candidate form's "
        "default (on for workdir, whose environment always loads it; off otherwise).",
    )
    timeout_s: float | None = Field(
        None, gt=0, le=MAX_EVAL_TIMEOUT_S, description="Wall-clock limit per child; None: settings.eval_timeout_s."
    )

    def judged_tolerance(self, form: CandidateForm) -> TolerancePreset:
        """The tolerance a candidate of ``form`` is judged at under these options: the paper rules (the workdir
        form's default) fix it at paper, as EvalRequest resolves it."""
        return TolerancePreset.PAPER if (self.rules or default_rules(form)) is RuleProfile.PAPER else self.tolerance


class EvalRequest(RequestModel, EvalOptions):
    problem_source: str = Field(
        description="KernelBench problem file: Model, get_inputs, get_init_inputs.", max_length=MAX_SOURCE_CHARS
    )
    candidate: CandidateSource
    artifact_key: str | None = Field(
        None, pattern=ARTIFACT_KEY_PATTERN, description="Compiled artifact of the candidate (compile_svc)."
    )

    @model_validator(mode="after")
    def _resolve_rules(self) -> EvalRequest:
        """The rule profile in force, written back so results record it; paper sets its tolerance and forbids
        PyTorch compute (a request asking for the strict tolerance or for compute under it is refused)."""
        self.rules = self.rules or default_rules(self.candidate.form)
        if self.load_reference_state is None:
            self.load_reference_state = self.candidate.form is CandidateForm.WORKDIR
        if self.rules is RuleProfile.PAPER:
            if self.tolerance is TolerancePreset.STRICT:
                raise ValueError("rules 'paper' judge at the paper tolerance (atol=rtol=1e-2), not 'strict'")
            if self.allow_torch_compute:
                raise ValueError("rules 'paper' forbid PyTorch compute: allow_torch_compute must be false")
            self.tolerance = TolerancePreset.PAPER
        return self


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
    peak_memory_bytes: dict[str, int] = Field(
        default_factory=dict,
        description="Peaks per child: device memory torch allocated ('reference', 'candidate'; GPU only) and "
        "resident host memory ('reference_host', 'candidate_host').",
    )
    memory_plan: dict[str, int] = Field(
        default_factory=dict,
        description="Bytes of one trial from a meta-device pass over the reference: input_bytes, output_bytes, "
        "parameter_bytes, reference_bytes, candidate_bytes, free_bytes (empty when the pass was impossible).",
    )
    disk_bytes_written: int | None = Field(
        None, description="Bytes the evaluation's child directories held at the end (problem, candidate, artifact)."
    )


class ProfileRequest(RequestModel):
    problem_source: str = Field(max_length=MAX_SOURCE_CHARS)
    candidate: CandidateSource
    artifact_key: str | None = Field(None, pattern=ARTIFACT_KEY_PATTERN)


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
