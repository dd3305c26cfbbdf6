"""Load KernelBench problem files and candidate files into fresh module namespaces.

A problem defines ``class Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()``; a candidate defines
``class ModelNew``. Each file is executed in its own new module, so a candidate never shares globals with the
problem it is judged against. Errors are ``ProblemError`` with one line naming what is wrong.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from cuda_agent.contracts.candidate import MODEL_NEW_FILE, PROBLEM_FILE


class ProblemError(ValueError):
    """A problem or candidate file that cannot be used; the message is one line naming what is wrong."""


@dataclass(frozen=True)
class Problem:
    module: types.ModuleType
    model_cls: type
    get_inputs: Callable[[], list[Any]]
    get_init_inputs: Callable[[], list[Any]]


def problem_hash(source: str) -> str:
    """Content address of a problem: sha256 of its text with line endings and trailing blanks normalized."""
    normalized = "\n".join(line.rstrip() for line in source.replace("\r\n", "\n").split("\n")).strip() + "\n"
    return hashlib.sha256(normalized.encode()).hexdigest()


def exec_module(source: str, name: str, filename: str) -> types.ModuleType:
    """Execute ``source`` as a new module registered under ``name`` (dataclasses and pickling need it there).

    Syntax errors and exceptions at import time become ``ProblemError`` naming the file and line.
    """
    module = types.ModuleType(name)
    module.__file__ = filename
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as exc:
        raise ProblemError(f"{filename}: syntax error at line {exc.lineno}: {exc.msg}") from None
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except Exception as exc:
        sys.modules.pop(name, None)
        line = _line_in(exc, filename)
        where = f" at line {line}" if line else ""
        raise ProblemError(f"{filename}: {type(exc).__name__}{where} while loading: {exc}") from None
    return module


def _line_in(exc: BaseException, filename: str) -> int | None:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    return frames[-1].lineno if frames else None


def load_problem(source: str, name: str = "kb_problem", filename: str = PROBLEM_FILE) -> Problem:
    module = exec_module(source, name, filename)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ProblemError(
            f"{filename}: missing {', '.join(missing)} (a problem defines Model, get_inputs, get_init_inputs)"
        )
    model_cls = module.Model
    if not isinstance(model_cls, type):
        raise ProblemError(f"{filename}: Model must be a class, got {type(model_cls).__name__}")
    for fn in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, fn)):
            raise ProblemError(f"{filename}: {fn} must be a function")
    return Problem(module, model_cls, module.get_inputs, module.get_init_inputs)


def load_candidate(source: str, name: str = "kb_candidate", filename: str = MODEL_NEW_FILE) -> type:
    """The ``ModelNew`` class of a candidate file."""
    module = exec_module(source, name, filename)
    model_new = getattr(module, "ModelNew", None)
    if model_new is None:
        raise ProblemError(f"{filename}: no ModelNew defined (a candidate defines class ModelNew)")
    if not isinstance(model_new, type):
        raise ProblemError(f"{filename}: ModelNew must be a class, got {type(model_new).__name__}")
    return model_new


def call_inputs(fn: Callable[[], Any], what: str) -> list[Any]:
    """Call get_inputs/get_init_inputs and check it returns a list or tuple."""
    try:
        values = fn()
    except Exception as exc:
        raise ProblemError(f"{what}() raised {type(exc).__name__}: {exc}") from None
    if not isinstance(values, list | tuple):
        raise ProblemError(f"{what}() must return a list, got {type(values).__name__}")
    return list(values)


@contextlib.contextmanager
def on_meta() -> Iterator[None]:
    """Tensors a problem makes land on the meta device: its shapes and dtypes, nothing allocated. Factory calls
    that name no device land there (``torch.device("meta")``), and so do those that name one and the moves to one
    (``device="cuda"``, ``.cuda()``, ``.to("cuda")``: problems written for a GPU, sized here on any machine).
    Distributions skip their argument checks: the checks branch on values (``if not valid.all()``), which meta
    tensors do not have (a get_inputs drawing from ``torch.distributions.Pareto``); the real run checks them."""
    import torch

    checked = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        with torch.device("meta"), _devices_on_meta():
            yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(checked)


def model_on_meta(problem: Problem, init_inputs: list[Any]) -> Any:
    """The problem's Model, built under ``on_meta``: there, or, where its constructor reads a value (a drop-path
    schedule's ``[x.item() for x in torch.linspace(0, 0.1, depth)]``, which meta tensors do not have), on the CPU and
    then its tensors replaced by meta ones of their shapes."""
    import torch

    try:
        return problem.model_cls(*init_inputs)
    except RuntimeError as exc:
        if "meta" not in str(exc):
            raise
    with torch._C.DisableTorchFunction():  # the meta device's modes off: factories make CPU tensors
        model = problem.model_cls(*init_inputs)
    return model.to_empty(device="meta") if isinstance(model, torch.nn.Module) else model


def _devices_on_meta() -> Any:
    """A torch function mode (``on_meta``) that names the meta device wherever a call names a device."""
    import torch
    from torch.overrides import TorchFunctionMode

    def is_device(value: object) -> bool:
        return isinstance(value, str | torch.device) or (isinstance(value, int) and not isinstance(value, bool))

    class DevicesOnMeta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = dict(kwargs or {})
            if kwargs.get("device") is not None:
                kwargs["device"] = "meta"
            if func in (torch.Tensor.cuda, torch.Tensor.cpu):
                return args[0]
            if func is torch.Tensor.to:  # to(device, dtype), to(dtype), to(tensor): the device left out
                args = (args[0], *(a for a in args[1:] if not is_device(a)))
                kwargs.pop("device", None)
                if len(args) == 1 and not {"dtype", "other"} & set(kwargs):
                    return args[0]
            return func(*args, **kwargs)

    return DevicesOnMeta()
