"""Run untrusted commands (candidate builds and evaluations) inside a bubblewrap sandbox."""

from cuda_agent.sandbox.bwrap import (
    SandboxLimits,
    SandboxProcess,
    SandboxResult,
    SandboxSpec,
    quota_mechanisms,
    run_sandboxed,
    sandbox_available,
    start_sandboxed,
)
from cuda_agent.sandbox.sweep import sweep_stale

__all__ = [
    "SandboxLimits",
    "SandboxProcess",
    "SandboxResult",
    "SandboxSpec",
    "quota_mechanisms",
    "run_sandboxed",
    "sandbox_available",
    "start_sandboxed",
    "sweep_stale",
]
