"""Contracts of dataset synthesis (the `dataset` queue, POST /v1/datasets) and of a problem measured alone (the
`eval` queue).

These are what a tenant may send, so every field is bounded, and none names a server path (the inductor cache, an
evaluation directory) or an endpoint (the llm composer reaches arbitrary hosts): those stay operator choices of
the CLI (`cuda-agent dataset synthesize`), and a request that sends one is refused (extra fields are forbidden)
rather than silently run without it. The handlers turn them into the library's options
(cuda_agent.dataset.jobs); this module imports no torch, so an API process never does.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cuda_agent.contracts.common import MAX_NAME_CHARS, MAX_SOURCE_CHARS, Device, RequestModel

MAX_PROBLEMS = 100_000  # one request: the paper's set is 6,000
MAX_OPS_LISTED = 1_000  # operator names in an include or exclude list
# Dataset names are read in URLs and file names: a version is written "name@2".
DATASET_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@:+-]*$"


class ComposeRequestOptions(RequestModel):
    """The programmatic composer's choices (cuda_agent.dataset.compose.ComposeOptions) that a tenant may make."""

    model_config = ConfigDict(extra="forbid")

    op_counts: dict[int, float] | None = Field(
        None, description="Weight of each chain length (1-5); None: the paper's mix (CUDA-Agent-Ops-6K)."
    )
    shapes: Literal["default", "small"] = Field(
        "default", description="default: GPU-sized inputs; small: inputs that run in microseconds (CPU runs, tests)."
    )
    allow_stochastic: bool = Field(False, description="Let stochastic operators into chains (the filter drops them).")
    include: list[str] | None = Field(
        None, max_length=MAX_OPS_LISTED, description="Only these operators (qualified names); None: all."
    )
    exclude: list[str] = Field(
        default_factory=list, max_length=MAX_OPS_LISTED, description="Never these operators (qualified names)."
    )
    anchor_weight: float = Field(4.0, ge=0.0, le=1000.0, description="How much likelier a self-sizing opener is.")
    tries_per_step: int = Field(12, ge=1, le=100, description="Operators tried at a step before a chain is given up.")

    @field_validator("op_counts")
    @classmethod
    def _chain_lengths(cls, counts: dict[int, float] | None) -> dict[int, float] | None:
        if counts is None:
            return None
        if not counts or any(not 1 <= length <= 5 for length in counts):
            raise ValueError("chain lengths are 1 to 5")
        if any(not 0.0 <= weight <= 1e6 for weight in counts.values()) or sum(counts.values()) <= 0:
            raise ValueError("weights are between 0 and 1e6, and not all 0")
        return counts

    @field_validator("include", "exclude")
    @classmethod
    def _names(cls, names: list[str] | None) -> list[str] | None:
        if names is not None and any(not 1 <= len(name) <= MAX_NAME_CHARS for name in names):
            raise ValueError(f"operator names are 1 to {MAX_NAME_CHARS} characters")
        return names


class FilterRequestOptions(RequestModel):
    """The execution filters' choices (cuda_agent.dataset.filters.FilterOptions) that a tenant may make."""

    model_config = ConfigDict(extra="forbid")

    device: Device = Field(Device.CPU, description="Where the filters run; cuda: CUDA-event timing, eval queue.")
    compile: bool = Field(True, description="Run the problem under torch.compile and compare with eager.")
    compile_backend: Literal["inductor", "aot_eager", "eager"] = Field(
        "inductor", description="torch.compile backend of the compile filter (aot_eager: tracing without codegen)."
    )
    compile_tolerance: float = Field(1e-2, gt=0.0, le=1.0, description="atol and rtol, compiled against eager.")
    distinct_tolerance: float = Field(
        1e-5, gt=0.0, le=1.0, description="Outputs for two inputs closer than this count as the same."
    )
    time_window_ms: tuple[float, float] | None = Field(
        None, description="Eager time window [low, high] in ms; None: 1-100 on cuda, 0.001-1000 on cpu."
    )
    timing_runs: int = Field(5, ge=1, le=100, description="Timed eager calls (after one warm-up).")
    timing_budget_s: float = Field(2.0, gt=0.0, le=60.0, description="Timed calls stop after this long.")
    timeout_s: float = Field(180.0, ge=1.0, le=1800.0, description="Wall clock of one problem's checks.")

    @field_validator("time_window_ms")
    @classmethod
    def _window(cls, window: tuple[float, float] | None) -> tuple[float, float] | None:
        if window is not None and not 0.0 <= window[0] <= window[1] <= 3_600_000.0:
            raise ValueError("the window is [low, high] ms with 0 <= low <= high <= 3,600,000")
        return window


class SynthesizeRequest(RequestModel):
    """Compose, filter and deduplicate until ``n`` problems are kept, and store them as dataset ``name``."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(ge=1, le=MAX_PROBLEMS, description="Problems to keep.")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="Same seed and options: same problems.")
    name: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_NAME_CHARS,
        pattern=DATASET_NAME_PATTERN,
        description="The dataset's name; None: one derived from the options, n and seed (the same request names "
        "the same dataset, so it is synthesized once).",
    )
    compose: ComposeRequestOptions = Field(default_factory=ComposeRequestOptions)
    filters: FilterRequestOptions = Field(default_factory=FilterRequestOptions)
    similarity_threshold: float = Field(0.9, ge=0.0, le=1.0, description="Drop a problem more similar than this.")
    max_candidates: int | None = Field(
        None, ge=1, le=5 * MAX_PROBLEMS, description="Give up after this many candidates; None: 5 per problem."
    )


class SynthesizeResult(BaseModel):
    dataset_id: str
    name: str
    kept: int
    stats: dict[str, Any] = Field(
        description="cuda_agent.dataset.pipeline.SynthesisStats: removals by stage with reasons, op-count shares."
    )
    reused: bool = Field(description="The dataset already existed for this request and was not synthesized again.")


class MeasureRequest(RequestModel):
    """One problem measured alone (no candidate): the execution filters, on the eval queue's GPU."""

    model_config = ConfigDict(extra="forbid")

    problem_source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS, description="A KernelBench-format file.")
    filters: FilterRequestOptions = Field(default_factory=FilterRequestOptions)


class FilterCheck(BaseModel):
    name: str
    passed: bool
    reason: str | None = None


class MeasureResult(BaseModel):
    """The filters' verdict on one problem; field names are those of cuda_agent.dataset.filters.ProblemVerdict."""

    source_hash: str
    passed: bool
    results: list[FilterCheck] = Field(description="In the order run; checking stops at the first failure.")
    eager_ms: float | None = Field(None, description="Median eager time (CUDA events on cuda).")
    compile_ms: float | None = Field(None, description="Median torch.compile time, measured the same way.")
    infra_error: str | None = Field(None, description="The sandbox failed: no verdict on the problem.")


class DatasetSummary(BaseModel):
    id: str
    name: str
    created_at: datetime
    problems: int
    stats: dict[str, Any] | None = Field(None, description="A synthesis's statistics; None for an import.")


class DatasetDetail(DatasetSummary):
    seed: int | None = None
    options: dict[str, Any] | None = None
    removed_by_reason: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="Per stage (filter:<name>, compose, duplicate, ...), rejections by reason."
    )


class DatasetProblem(BaseModel):
    problem_id: str
    source_hash: str
    ops: list[str]
    op_count: int
    data_source: str
    split: str
    code: str
    filters: list[dict[str, Any]] | None = Field(None, description="The filters' results when it was kept.")


class DatasetProblemsPage(BaseModel):
    total: int
    offset: int
    limit: int
    items: list[DatasetProblem]
