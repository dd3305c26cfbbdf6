"""Launch hooks for KernelBench-form candidates, the counterpart of ``cuda_agent.kernels.set_launch_hook``.

The harness wraps ``torch.utils.cpp_extension.load`` and ``load_inline`` before the candidate loads, so every
function of the extension modules they return calls a hook before and after it runs. With CUDA events in that
hook the harness measures the share of GPU time spent inside the candidate's compiled code where the PyTorch
profiler records no GPU kernels (CUPTI gives none on some hosts, the H200 host among them).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import torch

Hook = Callable[[bool, int | None], None]

# Captured at import, before any candidate code exists.
_current_stream = torch.cuda.current_stream
_hook: Hook | None = None


def set_hook(hook: Hook | None) -> None:
    """Have ``hook(before, stream)`` called around every extension function call; ``stream`` is torch's current
    CUDA stream, where extensions launch by convention. None removes it."""
    global _hook
    _hook = hook


def wrap_module(module: types.ModuleType) -> types.ModuleType:
    """Replace each compiled (pybind11) function of ``module`` by one that calls the hook around it."""
    for name, value in list(vars(module).items()):
        if isinstance(value, types.BuiltinFunctionType):
            setattr(module, name, _hooked(value))
    return module


def preload(directory: str, name: str) -> types.ModuleType:
    """Import the compiled module ``name`` from ``directory`` (a workdir-form artifact) and wrap it, so the
    candidate's own ``import name`` finds it in sys.modules, hooked like a module cpp_extension returned."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    path = os.path.join(directory, f"{name}.so")
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise ImportError(f"cannot load {name} from {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = wrap_module(module)
    return module


def install() -> Callable[[Hook | None], None]:
    """Make cpp_extension's loaders return wrapped modules (call before the candidate loads); returns set_hook."""
    from torch.utils import cpp_extension

    for name in ("load", "load_inline"):
        setattr(cpp_extension, name, _wrapping_loader(getattr(cpp_extension, name)))
    return set_hook


def _wrapping_loader(loader: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(loader)
    def load(*args: Any, **kwargs: Any) -> Any:
        module = loader(*args, **kwargs)
        # is_python_module=False returns no module: its functions are torch.ops, which the guards see.
        return wrap_module(module) if isinstance(module, types.ModuleType) else module

    return load


def _hooked(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        hook = _hook
        if hook is None:
            return fn(*args, **kwargs)
        stream = _current_stream().cuda_stream
        hook(True, stream)
        try:
            return fn(*args, **kwargs)
        finally:
            hook(False, stream)

    return call
