"""Output comparison, done in the reference child on the device where the outputs are.

The reference keeps its own outputs; the candidate's arrive in the shared buffer (``child/shared.py``). Tensors
are compared in chunks, so a multi-gigabyte output needs only a few hundred megabytes of temporaries. The same
rules as ``torch.allclose`` (|cand - ref| <= atol + rtol * |ref| everywhere), with NaN and Inf in the candidate
named as such, shape and dtype checked first (by the parent, on the descriptions both children send).

An output the rule rejects gets a second opinion where a float64 run of the reference can be had: the reference
is itself a rounded result, and where it is farther from the exact value than the tolerance (long scans and sums
in float32: the running total's rounding outgrows 1e-4 near its zero crossings), an accurate candidate must not
fail for being accurate. An element then passes when the candidate is as close to the float64 result as the
reference is, plus the tolerance: torch's own output always passes, and a candidate gains no slack where the
reference was exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from cuda_agent.contracts.common import TolerancePreset
from cuda_agent.eval.child.protocol import OutputMeta
from cuda_agent.eval.tolerance import tolerance_for

CHUNK_ELEMENTS = 1 << 25  # 32M elements: at most ~0.5 GB of temporaries whatever the output's size
_FINGERPRINT_PARTS = 4


@dataclass
class Comparison:
    passed: bool = True
    failures: list[str] = field(default_factory=list)
    max_abs_error: float | None = None


def meta_mismatch(cand: list[OutputMeta | None], ref: list[OutputMeta | None]) -> list[str]:
    """Why the candidate's outputs cannot be compared to the reference's at all (count, shape, dtype)."""
    if len(cand) != len(ref):
        return [f"returned {len(cand)} outputs, expected {len(ref)}"]
    failures = []
    for i, (c, r) in enumerate(zip(cand, ref, strict=True)):
        if r is None:
            continue
        if c is None:
            failures.append(f"output {i}: output is not a tensor")
        elif c.shape != r.shape:
            failures.append(f"output {i}: output shape {tuple(c.shape)} != expected {tuple(r.shape)}")
        elif c.dtype != r.dtype:
            failures.append(f"output {i}: output dtype {c.dtype} != expected {r.dtype}")
    return failures


def _wide(t: torch.Tensor) -> torch.Tensor:
    """The tensor in a dtype its differences are exact enough in: half types in float32, the rest as they are
    (float32 differences round at 6e-8 relative, far under every tolerance). Never modified in place."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def chunks(t: torch.Tensor) -> list[torch.Tensor]:
    flat = t.reshape(-1)
    return [flat[i : i + CHUNK_ELEMENTS] for i in range(0, flat.numel(), CHUNK_ELEMENTS)]


def compare_one(
    cand: torch.Tensor, ref: torch.Tensor, preset: TolerancePreset, exact: torch.Tensor | None = None
) -> tuple[bool, str, float]:
    """(passed, why not, max abs error vs ``ref``) for one output of matching shape and dtype; ``exact``: the
    reference's output computed in float64, the second opinion (module docstring)."""
    if not (ref.is_floating_point() or ref.is_complex()):
        equal = bool(torch.equal(cand, ref))
        return equal, "" if equal else "integer output differs", 0.0 if equal else math.inf
    if cand.numel() == 0:
        return True, "", 0.0
    tol = tolerance_for(preset, str(ref.dtype))
    worst = torch.zeros((), dtype=torch.float64, device=ref.device)
    within = torch.ones((), dtype=torch.bool, device=ref.device)
    refs = chunks(ref)
    exacts: list[torch.Tensor | None] = [None] * len(refs) if exact is None else list(chunks(exact))
    for c, r, e in zip(chunks(cand), refs, exacts, strict=True):
        c, r = _wide(c), _wide(r)
        diff = (c - r).abs_()
        # NaN propagates through max (torch.maximum keeps it); Inf shows as Inf.
        worst = torch.maximum(worst, diff.max().double())
        close = diff <= r.abs().mul_(tol.rtol).add_(tol.atol)
        del diff
        if e is not None:
            close |= (c - e).abs_() <= e.abs().mul_(tol.rtol).add_(tol.atol).add_((r - e).abs_())
        within &= close.all()
        del close
    max_err = float(worst)
    if not math.isfinite(max_err) and not bool(torch.isfinite(cand).all()):
        return False, "output contains NaN or Inf", math.inf
    ok = math.isfinite(max_err) and bool(within)
    if ok:
        return True, "", max_err
    why = f"max abs error {max_err:.3g} exceeds atol={tol.atol} rtol={tol.rtol}"
    if exact is not None:
        why += ", and the output is farther from a float64 run of the reference than the reference is"
    return False, why, max_err


def compare_outputs(
    cand: list[torch.Tensor | None],
    ref: list[torch.Tensor | None],
    preset: TolerancePreset,
    exact: list[torch.Tensor | None] | None = None,
) -> Comparison:
    """Every output compared; ``exact``: the float64 second opinion per output (None where there is none)."""
    result = Comparison()
    errors = []
    exacts = exact if exact is not None else [None] * len(ref)
    for i, (c, r, e) in enumerate(zip(cand, ref, exacts, strict=True)):
        if r is None or c is None:
            continue
        ok, why, err = compare_one(c, r, preset, e)
        if math.isfinite(err):
            errors.append(err)
        if not ok:
            result.passed = False
            result.failures.append(f"output {i}: {why}")
    result.max_abs_error = max(errors) if errors else None
    return result


def exact_candidates(ref: list[torch.Tensor | None]) -> bool:
    """Whether a float64 second opinion could change a verdict: some output is real floating point."""
    return any(r is not None and r.is_floating_point() and r.dtype != torch.float64 for r in ref)


def _nonfinite(t: torch.Tensor) -> bool:
    return bool(t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all())


def _passes_constant(t: torch.Tensor, constant: float | None, preset: TolerancePreset) -> bool:
    tol = tolerance_for(preset, str(t.dtype))
    for chunk in chunks(t):
        w = _wide(chunk)
        diff = w.abs() if constant is None else (w - constant).abs_()
        if not bool((diff <= w.abs().mul_(tol.rtol).add_(tol.atol)).all()):
            return False
    return True


def degenerate_reason(ref: list[torch.Tensor | None], preset: TolerancePreset) -> str | None:
    """Why one trial's reference outputs cannot tell right from wrong answers, or None: an all-zeros or all-mean
    output passes, or the reference itself is not finite. (That outputs do not depend on the inputs shows across
    trials: equal fingerprints.)"""
    tensors = [r for r in ref if r is not None]
    if not tensors:
        return "the reference returned no tensor"
    if any(_nonfinite(t) for t in tensors):
        return "the reference output contains NaN or Inf"
    floats = [t for t in tensors if t.is_floating_point() and t.numel()]
    if floats and all(_passes_constant(t, None, preset) for t in floats):
        return "an all-zeros output passes the tolerance"
    if floats and all(
        _passes_constant(t, float(torch.sum(t, dtype=torch.float64)) / t.numel(), preset) for t in floats
    ):
        return "a constant output (the mean) passes the tolerance"
    return None


def fingerprint(values: list[torch.Tensor | None]) -> list[float]:
    """A few numbers per output that differ when the outputs do (sums weighted by position, first and last
    element): equal fingerprints across trials mean the same output for different inputs."""
    parts: list[float] = []
    for t in values:
        if t is None or t.numel() == 0:
            parts += [0.0] * _FINGERPRINT_PARTS
            continue
        flat = t.reshape(-1)
        real = torch.view_as_real(flat) if flat.is_complex() else flat
        total = torch.zeros((), dtype=torch.float64, device=t.device)
        weighted = torch.zeros((), dtype=torch.float64, device=t.device)
        for k, chunk in enumerate(chunks(real)):
            s = torch.sum(chunk, dtype=torch.float64)
            total += s
            weighted += (k + 1) * s
        ends = real.reshape(-1)[[0, -1]].double()
        parts += [float(total), float(weighted), float(ends[0]), float(ends[1])]
    return [p if math.isfinite(p) else 1e308 for p in parts]
