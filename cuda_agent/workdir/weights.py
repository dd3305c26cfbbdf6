"""Weight transfer: the reference model's ``state_dict`` loaded into ``ModelNew``, as the released CUDA Agent
environment does before it compares them (``EvalOptions.load_reference_state``).

Strict, like ``load_state_dict``'s default, but the error names every missing, unexpected and mismatched key in
one line, so a policy can fix its parameter names and shapes in one go.
"""

from __future__ import annotations

from typing import Any

import torch

_SHOWN = 8


class WeightTransferError(ValueError):
    """ModelNew's parameters and buffers do not match the reference's; the message names the keys."""


def _names(keys: list[str]) -> str:
    more = f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
    return ", ".join(keys[:_SHOWN]) + more


def state_problems(reference: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """What keeps ``reference`` from loading into a module whose state_dict is ``candidate``: empty when it loads."""
    missing = sorted(set(reference) - set(candidate))
    unexpected = sorted(set(candidate) - set(reference))
    mismatched = [
        f"{k} (reference {tuple(reference[k].shape)}, ModelNew {tuple(candidate[k].shape)})"
        for k in sorted(set(reference) & set(candidate))
        if isinstance(reference[k], torch.Tensor)
        and isinstance(candidate[k], torch.Tensor)
        and reference[k].shape != candidate[k].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing in ModelNew: {_names(missing)}")
    if unexpected:
        problems.append(f"not in the reference: {_names(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatch: {_names(mismatched)}")
    return problems


def transfer_state(reference: Any, candidate: Any) -> None:
    """Load ``reference``'s state_dict into ``candidate`` (both nn.Modules), or raise WeightTransferError."""
    if not isinstance(reference, torch.nn.Module) or not isinstance(candidate, torch.nn.Module):
        raise WeightTransferError("weight transfer needs Model and ModelNew to be torch.nn.Module instances")
    state = reference.state_dict()
    if problems := state_problems(state, candidate.state_dict()):
        raise WeightTransferError("the reference state_dict does not load into ModelNew: " + "; ".join(problems))
    with torch.no_grad():
        candidate.load_state_dict(state, strict=True)
