"""Benchmark cases: a problem file with its candidate, found on disk, optionally shrunk, sized on the meta device.

A folder of cases holds one folder per case: ``<name>/problem.py`` (KernelBench format) next to the candidate
(``model_new.py`` and ``kernels/``, the project form). ``cuda-agent compile <name>/`` builds the candidate alone:
``problem.py`` is not a candidate file.

Problems read their size from ``SCALE = float(os.environ.get("CUDA_AGENT_BENCH_SCALE", "1.0"))`` (one line, at
module level). The evaluation children do not inherit the environment, so the benchmark pins the scale in the
source text it sends instead: ``SCALE = 0.25``.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from cuda_agent.contracts.candidate import MODEL_NEW_FILE, PROBLEM_FILE
from cuda_agent.problem import ProblemError, call_inputs, load_problem

SCALE_ENV = "CUDA_AGENT_BENCH_SCALE"
_SCALE_LINE = re.compile(r"^SCALE = .*$", re.MULTILINE)
T = TypeVar("T")


class BenchError(ValueError):
    """The cases cannot be benchmarked as asked; the message names the path or the name."""


@dataclass(frozen=True)
class BenchCase:
    name: str
    problem: Path
    candidate: Path


class ProblemSizes(BaseModel):
    """Bytes of one call at the evaluated size, from a pass on the meta device (no memory used)."""

    input_bytes: int
    output_bytes: int
    parameter_bytes: int
    outputs: list[str]


def pick(found: dict[str, T], only: Sequence[str], what: str, root: Path) -> list[T]:
    """The entries named in ``only`` (all when empty); a name that is not there is an error listing what is."""
    unknown = [name for name in only if name not in found]
    if unknown:
        raise BenchError(f"no {what} named {', '.join(unknown)} in {root}; there are: {', '.join(found)}")
    return [found[name] for name in only] if only else list(found.values())


def discover_cases(root: Path, only: Sequence[str] = ()) -> list[BenchCase]:
    """The cases under ``root`` (sorted by name), or the ones named in ``only``."""
    if not root.is_dir():
        raise BenchError(f"{root}: no such folder of problems")
    cases = {
        d.name: BenchCase(d.name, d / PROBLEM_FILE, d)
        for d in sorted(root.iterdir())
        if (d / PROBLEM_FILE).is_file() and (d / MODEL_NEW_FILE).is_file()
    }
    if not cases:
        raise BenchError(f"{root}: no case folders (<name>/{PROBLEM_FILE} with <name>/{MODEL_NEW_FILE})")
    return pick(cases, only, "case", root)


def pin_scale(source: str, scale: float, where: str) -> str:
    """``source`` with its ``SCALE = ...`` line replaced by the literal ``scale``; unchanged at scale 1."""
    if scale == 1.0:
        return source
    if not 0.0 < scale <= 1.0:
        raise BenchError(f"scale must be in (0, 1], got {scale}")
    source, found = _SCALE_LINE.subn(f"SCALE = {scale!r}", source)
    if found != 1:
        raise BenchError(f"{where}: cannot scale: expected one module-level 'SCALE = ...' line, found {found}")
    return source


def _describe(values: Any) -> list[str]:
    import torch

    if isinstance(values, torch.Tensor):
        return [f"{str(values.dtype).removeprefix('torch.')}{list(values.shape)}"]
    if isinstance(values, list | tuple):
        return [d for v in values for d in _describe(v)]
    return []


def meta_sizes(source: str, filename: str = PROBLEM_FILE) -> ProblemSizes:
    """Sizes of inputs, parameters and outputs of one call, computed on the meta device.

    The same pass as the evaluation's memory plan (``cuda_agent.eval.memory.meta_call``).
    """
    from cuda_agent.eval.memory import meta_call, nbytes

    module_name = f"bench_meta_{uuid.uuid4().hex}"
    problem = load_problem(source, name=module_name, filename=filename)
    try:
        model, inputs, outputs = meta_call(problem, call_inputs(problem.get_init_inputs, "get_init_inputs"))
    except ProblemError:
        raise
    except Exception as exc:
        raise ProblemError(f"{filename}: cannot run on the meta device: {type(exc).__name__}: {exc}") from None
    finally:
        sys.modules.pop(module_name, None)
    return ProblemSizes(
        input_bytes=nbytes(inputs),
        output_bytes=nbytes(outputs),
        parameter_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        outputs=_describe(outputs),
    )
