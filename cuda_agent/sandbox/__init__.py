"""Run untrusted commands (candidate builds and evaluations) inside a bubblewrap sandbox."""

from cuda_agent.sandbox.bwrap import (
    SandboxLimits,
    SandboxProcess,
    SandboxResult,
    SandboxSpec,
    run_sandboxed,
    sandbox_available,
    start_sandboxed,
)

__all__ = [
    "SandboxLimits",
    "SandboxProcess",
    "SandboxResult",
    "SandboxSpec",
    "run_sandboxed",
    "sandbox_available",
    "start_sandboxed",
]
