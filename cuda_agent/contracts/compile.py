"""Contracts of compile_svc: what a build is asked for and what it reports."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from cuda_agent.contracts.candidate import CandidateSource
from cuda_agent.contracts.common import (
    MAX_NAME_CHARS,
    CompileStatus,
    Device,
    RequestModel,
)


class CompileRequest(RequestModel):
    candidate: CandidateSource
    device: Device = Device.CUDA
    arch: str | None = Field(
        None,
        max_length=32,
        pattern=r"^[a-z0-9_]+$",
        description="e.g. sm_90a; None: from settings, the local GPU, else sm_90a.",
    )
    extra_flags: list[str] = Field(
        default_factory=list, max_length=32, description="Extra nvcc/g++ flags (allow-listed)."
    )
    timeout_s: float | None = Field(
        None, gt=0, le=3600, description="Wall-clock limit; None: settings.compile_timeout_s."
    )

    @field_validator("extra_flags")
    @classmethod
    def _short_flags(cls, flags: list[str]) -> list[str]:
        if too_long := next((f for f in flags if len(f) > MAX_NAME_CHARS), None):
            raise ValueError(f"flag {too_long[:40]!r}... is longer than {MAX_NAME_CHARS} characters")
        return flags


class Diagnostic(BaseModel):
    """One compiler message, parsed so an agent can act on it."""

    file: str | None = None
    line: int | None = None
    column: int | None = None
    severity: str = "error"  # error | warning | note
    message: str
    code: str | None = Field(None, description="Known class, e.g. arch_mismatch, smem_overflow, undefined_symbol.")
    hint: str | None = Field(None, description="What to change, for known classes.")


class KernelResources(BaseModel):
    """Per-kernel usage reported by `ptxas -v`."""

    kernel: str
    registers: int | None = None
    shared_bytes: int | None = None
    spill_stores_bytes: int | None = None
    spill_loads_bytes: int | None = None
    stack_bytes: int | None = None
    constant_bytes: int | None = None


class CompileResult(BaseModel):
    status: CompileStatus
    cache_key: str = Field(description="Content address of (normalized sources, flags, arch, toolchain versions).")
    artifact_key: str | None = Field(None, description="Set when status is ok; fetch with the artifact store.")
    cache_hit: bool = False
    duration_s: float = 0.0
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    resources: list[KernelResources] = Field(default_factory=list)
    log: str = Field("", description="Compiler output, truncated.")
    message: str = Field("", description="One line summary for humans and agents.")
