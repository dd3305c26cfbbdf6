"""Output comparison, done in the parent on tensors both children saved (loaded with ``weights_only=True``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from cuda_agent.contracts.common import TolerancePreset
from cuda_agent.eval.tolerance import tolerance_for


class OutputsUnreadable(ValueError):
    pass


def load_outputs(path: Path) -> dict[str, list[list[torch.Tensor | None]]]:
    """Outputs a child saved: {"trials": [[tensor|None, ...], ...], "spot": [...]}; anything else is rejected."""
    if not path.exists():
        return {"trials": [], "spot": []}
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise OutputsUnreadable(f"outputs file unreadable: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(raw, dict) or set(raw) != {"trials", "spot"}:
        raise OutputsUnreadable("outputs file has the wrong structure")
    for group in raw.values():
        if not isinstance(group, list) or not all(isinstance(t, list) for t in group):
            raise OutputsUnreadable("outputs file has the wrong structure")
        for trial in group:
            if not all(v is None or type(v) is torch.Tensor for v in trial):
                raise OutputsUnreadable("outputs file holds something other than plain tensors")
    return raw


@dataclass
class Comparison:
    passed: int = 0
    failures: list[str] = field(default_factory=list)
    max_abs_error: float = 0.0


def _nonfinite(t: torch.Tensor) -> bool:
    return bool(t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all())


def _wide(t: torch.Tensor) -> torch.Tensor:
    """The tensor in a dtype its differences are exact enough in: half types in float32, the rest as they are
    (float32 differences round at 6e-8 relative, far under every tolerance). Never modified in place."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _within(diff: torch.Tensor, ref_abs: torch.Tensor, atol: float, rtol: float) -> bool:
    """|diff| <= atol + rtol * |ref| everywhere; ``ref_abs`` is consumed."""
    return bool((diff <= ref_abs.mul_(rtol).add_(atol)).all())


def compare_one(cand: Any, ref: torch.Tensor, preset: TolerancePreset) -> tuple[bool, str, float]:
    """(passed, why not, max abs error) for one output tensor."""
    if cand is None:
        return False, "output is not a tensor", float("inf")
    if tuple(cand.shape) != tuple(ref.shape):
        return False, f"output shape {tuple(cand.shape)} != expected {tuple(ref.shape)}", float("inf")
    if cand.dtype != ref.dtype:
        return False, f"output dtype {cand.dtype} != expected {ref.dtype}", float("inf")
    if not (ref.is_floating_point() or ref.is_complex()):
        equal = bool(torch.equal(cand, ref))
        return equal, "" if equal else "integer output differs", 0.0 if equal else float("inf")
    if cand.numel() == 0:
        return True, "", 0.0
    tol = tolerance_for(preset, str(ref.dtype))
    c, r = _wide(cand), _wide(ref)
    diff = (c - r).abs_()
    max_err = float(diff.max())
    if not math.isfinite(max_err) and _nonfinite(cand):  # NaN propagates through max; Inf shows as Inf
        return False, "output contains NaN or Inf", float("inf")
    ok = math.isfinite(max_err) and _within(diff, r.abs(), tol.atol, tol.rtol)
    return ok, "" if ok else f"max abs error {max_err:.3g} exceeds atol={tol.atol} rtol={tol.rtol}", max_err


def compare_trials(cand: list[list[Any]], ref: list[list[torch.Tensor | None]], preset: TolerancePreset) -> Comparison:
    result = Comparison()
    for k, ref_values in enumerate(ref):
        if k >= len(cand):
            result.failures.append(f"trial {k}: no output")
            continue
        cand_values = cand[k]
        if len(cand_values) != len(ref_values):
            result.failures.append(f"trial {k}: returned {len(cand_values)} outputs, expected {len(ref_values)}")
            continue
        trial_ok = True
        for i, (c, r) in enumerate(zip(cand_values, ref_values, strict=True)):
            if r is None:
                continue
            ok, why, err = compare_one(c, r, preset)
            if err != float("inf"):
                result.max_abs_error = max(result.max_abs_error, err)
            if not ok:
                trial_ok = False
                result.failures.append(f"trial {k} output {i}: {why}")
        result.passed += trial_ok
    return result


def degenerate_reason(ref: list[list[torch.Tensor | None]], preset: TolerancePreset) -> str | None:
    """Why the problem cannot tell right from wrong answers, or None: an all-zeros or all-mean output passes,
    its outputs do not depend on the inputs, or the reference itself is not finite."""
    tensors = [r for trial in ref for r in trial if r is not None]
    if not tensors:
        return "the reference returned no tensor"
    if any(_nonfinite(t) for t in tensors):
        return "the reference output contains NaN or Inf"
    floats = [t for t in tensors if t.is_floating_point() and t.numel()]

    def passes(constant: float | None, t: torch.Tensor) -> bool:
        tol = tolerance_for(preset, str(t.dtype))
        w = _wide(t)
        diff = w.abs() if constant is None else (w - constant).abs_()
        return _within(diff, w.abs(), tol.atol, tol.rtol)

    if floats and all(passes(None, t) for t in floats):
        return "an all-zeros output passes the tolerance"
    if floats and all(passes(float(t.double().mean()), t) for t in floats):
        return "a constant output (the mean) passes the tolerance"
    if len(ref) > 1 and all(_same(trial, ref[0]) for trial in ref[1:]):
        return "the reference output does not depend on the inputs"
    return None


def _same(a: list[torch.Tensor | None], b: list[torch.Tensor | None]) -> bool:
    return len(a) == len(b) and all(
        x is not None and y is not None and x.shape == y.shape and bool(torch.equal(x, y))
        for x, y in zip(a, b, strict=True)
    )


def constant_output(cand: list[list[Any]], ref: list[list[torch.Tensor | None]]) -> bool:
    """The candidate returned the same output for different inputs while the reference did not."""
    if len(cand) < 2 or len(ref) < 2:
        return False
    return all(_same(t, cand[0]) for t in cand[1:]) and not all(_same(t, ref[0]) for t in ref[1:])
