"""Tolerance profiles. The profile used is recorded on every result (Fingerprint.tolerance)."""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.contracts.common import TolerancePreset

LOW_PRECISION = frozenset({"torch.float16", "torch.bfloat16", "torch.float8_e4m3fn", "torch.float8_e5m2"})


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


def tolerance_for(preset: TolerancePreset, dtype: str) -> Tolerance:
    """atol/rtol of ``preset`` for a reference output of ``dtype`` (as ``str(torch.dtype)``)."""
    if preset is TolerancePreset.KERNELBENCH:
        value = 1e-2 if dtype in LOW_PRECISION else 1e-4
        return Tolerance(atol=value, rtol=value)
    if preset is TolerancePreset.PAPER:
        return Tolerance(atol=1e-2, rtol=1e-2)
    return Tolerance(atol=1e-5, rtol=1e-3)
