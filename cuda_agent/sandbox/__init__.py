"""Run untrusted commands (candidate builds and evaluations) inside a bubblewrap sandbox."""

from cuda_agent.sandbox.bwrap import (
    SandboxLimits,
    SandboxResult,
    SandboxSpec,
    run_sandboxed,
    sandbox_available,
)

__all__ = ["SandboxLimits", "SandboxResult", "SandboxSpec", "run_sandboxed", "sandbox_available"]
