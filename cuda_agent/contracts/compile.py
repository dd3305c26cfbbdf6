"""Contracts of compile_svc: what a build is asked for and what it reports."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from cuda_agent.contracts.common import CompileStatus, Device


class CandidateForm(StrEnum):
    # One Python file defining ModelNew that builds its code with torch.utils.cpp_extension.load_inline.
    KERNELBENCH = "kernelbench"
    # model_new.py + kernels/*.cu|*.cpp|*.h, built without torch headers and bound by our fixed launcher
    # (cuda_agent.kernels); the fast path.
    PROJECT = "project"


class CandidateSource(BaseModel):
    """A candidate as submitted: relative path -> file text. KERNELBENCH holds `model_new.py` only."""

    form: CandidateForm
    files: dict[str, str] = Field(description="Relative path -> content; `model_new.py` is always present.")

    @property
    def model_new(self) -> str:
        return self.files["model_new.py"]


class CompileRequest(BaseModel):
    candidate: CandidateSource
    device: Device = Device.CUDA
    arch: str | None = Field(None, description="e.g. sm_90a; None: from settings, the local GPU, else sm_90.")
    extra_flags: list[str] = Field(default_factory=list, description="Extra nvcc/g++ flags (allow-listed).")
    timeout_s: float | None = Field(None, description="Wall-clock limit; None: settings.compile_timeout_s.")


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
