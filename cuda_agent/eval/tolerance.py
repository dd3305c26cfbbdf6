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


def admits_tf32(preset: TolerancePreset) -> bool:
    """Whether float32 outputs judged at ``preset`` may come from TF32 tensor cores: TF32 keeps 10 mantissa bits,
    about 5e-4 relative error per product, so it needs tolerances of 1e-3 or looser."""
    tol = tolerance_for(preset, "torch.float32")
    return tol.atol >= 1e-3 and tol.rtol >= 1e-3
