"""The lockstep protocol between the parent and an evaluation child: one command, one reply.

Nothing secret exists in a child before it is needed. The candidate's job holds no seed and no spot-check index:
each correctness trial's seed (the unpredictable one too) arrives with its ``trial`` command once the candidate's
model exists, and whether a timed call's output is checked is decided after the call returned (``ship`` or
``next``). The candidate's replies are untrusted: the parent validates every one against these models (bounded
sizes, no extra fields) and treats anything else as tampering.

Outputs never travel in messages: the reference describes its outputs (``OutputMeta``: shape, dtype, offset in
the shared buffer) and passes the buffer's descriptor with the first description that needs a new buffer.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from cuda_agent.contracts.common import TolerancePreset

Role = Literal["reference", "candidate", "profile"]
ChildStatus = Literal["ok", "problem_error", "candidate_error", "runtime_error", "illegal_access", "out_of_memory"]
DTYPES = (
    "torch.float32",
    "torch.float64",
    "torch.float16",
    "torch.bfloat16",
    "torch.complex64",
    "torch.complex128",
    "torch.int8",
    "torch.uint8",
    "torch.int16",
    "torch.int32",
    "torch.int64",
    "torch.bool",
    "torch.float8_e4m3fn",
    "torch.float8_e5m2",
)
Dtype = Literal[DTYPES]  # type: ignore[valid-type]
_MAX_OUTPUTS = 64
_MAX_FINDINGS = 64
_SHORT = 2000


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OutputMeta(_Message):
    shape: list[Annotated[int, Field(ge=0)]] = Field(max_length=16)
    dtype: Dtype
    offset: int = Field(0, ge=0, description="Byte offset in the shared buffer (reference layouts only).")


class MemoryPlan(_Message):
    """Bytes one trial holds, from a meta-device pass over the reference."""

    input_bytes: int
    output_bytes: int
    parameter_bytes: int
    reference_bytes: int = Field(description="Parameters, inputs (base and scaled), outputs, shared buffer.")
    candidate_bytes: int = Field(description="Parameters, inputs (pristine and given), outputs (early, previous).")
    free_bytes: int | None = Field(None, description="Free device memory the reference saw before allocating.")


# --- parent -> child ------------------------------------------------------------------------------------------


class JobCommand(_Message):
    op: Literal["job"] = "job"
    role: Role
    device: Literal["cuda", "cpu"]
    memory_fraction: float = 0.9
    project_form: bool = False
    allow_torch_compute: bool = False
    load_reference_state: bool = Field(False, description="Load the reference's state_dict into ModelNew.")
    tolerance: TolerancePreset = TolerancePreset.KERNELBENCH
    baselines: list[Literal["eager", "compile"]] = Field(default_factory=list)
    warmup: int = 0
    trials: int = 0
    budget_s: float = Field(30.0, description="Stop timing early after this long (at least 10 trials run).")
    env: dict[str, str] = Field(default_factory=dict, description="Set before the candidate loads (artifact paths).")


class TrialCommand(_Message):
    op: Literal["trial"] = "trial"
    index: int
    seed: int


class SpotCommand(_Message):
    """Reference: the output of timed call ``call`` (base inputs of ``base_seed`` scaled per call)."""

    op: Literal["spot"] = "spot"
    base_seed: int
    scale_seed: int
    call: int


class ShipCommand(_Message):
    """Candidate: copy the kept outputs into the shared buffer at ``layout`` (a descriptor comes when new)."""

    op: Literal["ship"] = "ship"
    layout: list[OutputMeta | None]
    nbytes: int
    new_buffer: bool


class CompareCommand(_Message):
    op: Literal["compare"] = "compare"
    exact_budget_s: float = Field(0.0, ge=0, description="Seconds a float64 second opinion may take.")


class ReleaseCommand(_Message):
    op: Literal["release"] = "release"


class TimeCommand(_Message):
    op: Literal["time"] = "time"
    base_seed: int
    scale_seed: int
    baselines: list[Literal["eager", "compile"]] = Field(default_factory=list, description="Reference only.")


class NextCommand(_Message):
    op: Literal["next"] = "next"


class FinishCommand(_Message):
    """Send the final report, echoing ``nonce``: a report written before this command cannot be the harness's."""

    op: Literal["finish"] = "finish"
    nonce: int


Command = Annotated[
    JobCommand
    | TrialCommand
    | SpotCommand
    | ShipCommand
    | CompareCommand
    | ReleaseCommand
    | TimeCommand
    | NextCommand
    | FinishCommand,
    Field(discriminator="op"),
]
COMMANDS: TypeAdapter[Command] = TypeAdapter(Command)


# --- child -> parent ------------------------------------------------------------------------------------------


class ChildTimings(_Message):
    method: Literal["cuda_events", "perf_counter"]
    samples_ms: list[float] = Field(max_length=1_000_000)
    host_samples_ms: list[float] = Field(default_factory=list, max_length=1_000_000)


class ChildReport(_Message):
    op: Literal["report"] = "report"
    nonce: int | None = Field(None, description="The finish command's; None in a report of an early stop.")
    role: Role
    status: ChildStatus
    message: str = Field("", max_length=4000)
    phases: dict[str, float] = Field(
        default_factory=dict, description="Phase -> Unix time it ended; diagnostics only, never a verdict input."
    )
    findings: list[tuple[str, str]] = Field(default_factory=list, max_length=_MAX_FINDINGS)
    output_aliases_input: bool = False
    trials_run: int = 0
    timings: dict[str, ChildTimings] = Field(default_factory=dict)
    baseline_notes: dict[str, str] = Field(default_factory=dict)
    launch_count: int | None = None
    kernels: dict[str, float] = Field(default_factory=dict, description="GPU kernel name -> time (us) in one call.")
    custom_kernel_time_share: float | None = None
    custom_kernel_time_method: Literal["profiler", "launcher_events"] | None = None
    peak_memory_bytes: int | None = Field(None, description="Peak device memory torch allocated in this child.")
    peak_host_bytes: int | None = Field(None, description="Peak resident host memory of this child.")
    torch_version: str = ""
    cuda_version: str | None = None
    gpu_name: str | None = None


class Ready(_Message):
    op: Literal["ready"] = "ready"
    plan: MemoryPlan | None = None
    plan_note: str = Field("", max_length=_SHORT)


class Outputs(_Message):
    """Reference: it ran a trial (or a spot call) and keeps the outputs; where they go in the shared buffer."""

    op: Literal["outputs"] = "outputs"
    layout: list[OutputMeta | None] = Field(max_length=_MAX_OUTPUTS)
    nbytes: int
    new_buffer: bool
    call_ms: float
    input_signature: list[str] = Field(max_length=_MAX_OUTPUTS)
    degenerate: str | None = None
    fingerprint: list[float] = Field(max_length=4 * _MAX_OUTPUTS)


class Ran(_Message):
    """Candidate: it ran a trial and keeps the outputs until ``ship``."""

    op: Literal["ran"] = "ran"
    outputs: list[OutputMeta | None] = Field(max_length=_MAX_OUTPUTS)
    input_signature: list[str] = Field(max_length=_MAX_OUTPUTS)


class Shipped(_Message):
    """Candidate: the kept outputs are in the buffer, if they matched the layout (``outputs`` says what they were)."""

    op: Literal["shipped"] = "shipped"
    outputs: list[OutputMeta | None] = Field(max_length=_MAX_OUTPUTS)


class Compared(_Message):
    op: Literal["compared"] = "compared"
    passed: bool
    failures: list[str]
    max_abs_error: float | None
    fingerprint: list[float]
    note: str = Field("", max_length=500, description="Whether a float64 second opinion was had, or why not.")


class Called(_Message):
    """Candidate: timed call ``trial`` returned (its output kept until ``ship`` or ``next``)."""

    op: Literal["called"] = "called"
    trial: int
    done: bool


class Timed(_Message):
    """Reference: baselines timed (the timings travel in the final report)."""

    op: Literal["timed"] = "timed"


Reply = Annotated[ChildReport | Ready | Outputs | Ran | Shipped | Compared | Called | Timed, Field(discriminator="op")]
REPLIES: TypeAdapter[Reply] = TypeAdapter(Reply)
