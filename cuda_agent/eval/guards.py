"""Run-time guards of the evaluation child, installed before any candidate code is loaded.

- ``ComputeGuard``: a TorchDispatchMode + TorchFunctionMode pair that lets ModelNew.forward allocate, view and
  copy tensors but not compute with PyTorch (every aten op, including those called from C++ extensions, passes
  through the dispatcher and therefore through the mode).
- ``AuditLog``: a ``sys.addaudithook`` hook (it cannot be removed) recording processes, sockets, frame tracing,
  gc walks, ctypes loads and file access by candidate code.
- ``Snapshot``: identities of timers, torch functions and harness functions, backend flags, RNG seeds and
  protected environment variables, captured before the candidate loads and compared after every phase.

Each violation is a ``Finding``-shaped ``(code, message)`` pair; the parent turns them into HACK_DETECTED.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import random
import sys
import threading
import time
import types
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Allocation, views, metadata and plain copies: what a ModelNew needs around its own kernels.
ALLOWED_ATEN_OPS = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "zeros",
        "zeros_like",
        "new_zeros",
        "ones",
        "ones_like",
        "new_ones",
        "full",
        "full_like",
        "new_full",
        "fill_",
        "zero_",
        "scalar_tensor",
        "lift_fresh",
        "lift_fresh_copy",
        "detach",
        "detach_",
        "alias",
        "view",
        "_unsafe_view",
        "_reshape_alias",
        "view_as",
        "as_strided",
        "expand",
        "t",
        "transpose",
        "permute",
        "squeeze",
        "unsqueeze",
        "select",
        "slice",
        "narrow",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "unflatten",
        "diagonal",
        "movedim",
        "unfold",
        "view_as_real",
        "view_as_complex",
        "_conj",
        "resolve_conj",
        "resolve_neg",
        "clone",
        "copy_",
        "_to_copy",
        "contiguous",
        "resize_",
        "record_stream",
        "set_",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "size",
        "stride",
        "numel",
        "dim",
        "is_same_size",
        "_local_scalar_dense",
        "_has_compatible_shallow_copy_type",
    }
)
# Ways to move tensor data out of torch into another compute library (numpy, Python lists, DLPack consumers).
_EXPORTS = (torch.Tensor.numpy, torch.Tensor.tolist, torch.Tensor.__array__, torch.Tensor.__dlpack__)
EXPORT_NAMES = frozenset(getattr(f, "__name__", str(f)) for f in _EXPORTS)

Finding = tuple[str, str]
# Captured at import, before any candidate code exists.
_equal = torch.equal
_storage = torch.Tensor.untyped_storage
_active_threads = threading.active_count


class GuardViolation(RuntimeError):
    pass


class _DispatchGuard(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self, owner: ComputeGuard) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.owner = owner

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name not in ALLOWED_ATEN_OPS:
            self.owner.violate("torch_compute_in_forward", f"PyTorch op {func} called in ModelNew.forward")
        elif name == "_to_copy" and "device" in kwargs and args and _device_of(args[0]) != _device(kwargs["device"]):
            self.owner.violate("device_transfer_in_forward", f"{func} moves data to {kwargs['device']} in forward")
        elif name == "copy_" and len(args) >= 2 and _device_of(args[0]) != _device_of(args[1]):
            self.owner.violate("device_transfer_in_forward", f"{func} copies across devices in forward")
        return func(*args, **kwargs)


class _FunctionGuard(TorchFunctionMode):
    def __init__(self, owner: ComputeGuard) -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if any(func is f for f in _EXPORTS):
            self.owner.violate(
                "tensor_export_in_forward", f"Tensor.{func.__name__} hands tensor data to non-torch code"
            )
        return func(*args, **(kwargs or {}))


def _device(value: Any) -> str:
    return str(torch.device(value))


def _device_of(tensor: Any) -> str:
    return str(tensor.device) if isinstance(tensor, torch.Tensor) else "?"


class ComputeGuard:
    """Context manager blocking PyTorch compute. Violations are recorded here first, so a candidate catching the
    raised GuardViolation does not erase them."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.findings: list[Finding] = []

    def violate(self, code: str, message: str) -> None:
        if (code, message) not in self.findings:
            self.findings.append((code, message))
        raise GuardViolation(f"{message} (only allocation, views and copies are allowed; write a kernel)")

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        with _FunctionGuard(self), _DispatchGuard(self):
            yield


class AuditLog:
    """Audit-hook based monitor. ``phase`` says what runs now: the harness, or candidate code (load, init,
    forward). Forbidden events raise inside the candidate's call and are recorded."""

    ALWAYS_FORBIDDEN = {
        "subprocess.Popen": "process_spawned",
        "os.system": "process_spawned",
        "os.exec": "process_spawned",
        "os.posix_spawn": "process_spawned",
        "os.spawn": "process_spawned",
        "os.fork": "process_spawned",
        "os.forkpty": "process_spawned",
        "os.kill": "signal_sent",
        "os.killpg": "signal_sent",
        "socket.connect": "network_access",
        "socket.bind": "network_access",
        "socket.getaddrinfo": "network_access",
        "sys.settrace": "frame_tracing",
        "sys.setprofile": "frame_tracing",
        "gc.get_objects": "harness_introspection",
        "gc.get_referrers": "harness_introspection",
        "gc.get_referents": "harness_introspection",
        "sys._current_frames": "harness_introspection",
    }
    # Processes are legitimate while a KernelBench candidate loads: load_inline probes ninja/nvcc.
    LOAD_ALLOWED = frozenset({"subprocess.Popen", "os.posix_spawn", "os.fork", "os.exec"})

    def __init__(self, protected_files: list[str], allowed_read_roots: list[str], library_roots: list[str]) -> None:
        self.phase = "harness"
        self.findings: list[Finding] = []
        self.protected = {os.path.realpath(p) for p in protected_files}
        self.read_roots = tuple(os.path.realpath(p) for p in allowed_read_roots + library_roots)
        # The candidate's own compiled code (kernels dir, torch extensions) may be loaded lazily in forward.
        self.library_roots = tuple(os.path.realpath(p) for p in library_roots)

    def install(self) -> None:
        sys.addaudithook(self._hook)

    @contextlib.contextmanager
    def running(self, phase: str) -> Iterator[None]:
        previous, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = previous

    def _record(self, code: str, message: str) -> None:
        if (code, message) not in self.findings and len(self.findings) < 50:
            self.findings.append((code, message))

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        phase = self.phase
        if phase == "harness":
            return
        code = self.ALWAYS_FORBIDDEN.get(event)
        if code is not None and not (phase == "load" and event in self.LOAD_ALLOWED):
            self._record(code, f"candidate raised audit event {event} during {phase}")
            raise PermissionError(f"{event} is not allowed in a candidate")
        if event == "ctypes.dlopen" and phase == "forward" and not self._own_library(args[0] if args else None):
            self._record("ctypes_in_forward", f"candidate loads a library with ctypes in forward: {args[0]}")
        elif event == "open" and args and isinstance(args[0], str | bytes):
            self._check_open(os.fsdecode(args[0]), args[1] if len(args) > 1 else "r", phase)
        elif event in ("os.remove", "os.rename", "os.truncate", "os.chmod") and args:
            path = args[0]
            if isinstance(path, str | bytes) and os.path.realpath(os.fsdecode(path)) in self.protected:
                self._record("harness_files_accessed", f"candidate {event} on harness file {os.fsdecode(path)}")
                raise PermissionError("harness files are off limits")

    def _own_library(self, name: object) -> bool:
        return (
            isinstance(name, str | bytes)
            and bool(self.library_roots)
            and (os.path.realpath(os.fsdecode(name)).startswith(self.library_roots))
        )

    def _check_open(self, path: str, mode: Any, phase: str) -> None:
        real = os.path.realpath(path)
        if real in self.protected:
            self._record("harness_files_accessed", f"candidate opened harness file {path}")
            raise PermissionError("harness files are off limits")
        if phase != "forward":
            return
        writing = isinstance(mode, str) and any(c in mode for c in "wax+")
        if writing or not real.startswith(self.read_roots):
            self._record("file_access_in_forward", f"candidate opened {path} (mode {mode}) in forward")


_TIMER_MODULES = ("time", "torch.cuda", "torch.cuda.Event", "torch.cuda.Stream")


def _watched() -> dict[str, Any]:
    """Namespaces whose callables the harness relies on, by label."""
    import torch.autograd.profiler
    import torch.nn.functional as F
    import torch.utils._python_dispatch as python_dispatch

    return {
        "time": time,
        "torch": torch,
        "torch.Tensor": torch.Tensor,
        "torch.nn.Module": torch.nn.Module,
        "torch.nn.functional": F,
        "torch.cuda": torch.cuda,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Stream": torch.cuda.Stream,
        "torch.autograd.profiler": torch.autograd.profiler,
        "torch.overrides": torch.overrides,
        "torch.utils._python_dispatch": python_dispatch,
        "builtins": builtins,
        "os": os,
        "sys": sys,
        "json": json,
        "random": random,
        "threading": threading,
    }


def _backend_flags() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flags: dict[str, Any] = {
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "default_dtype": str(torch.get_default_dtype()),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn.enabled": torch.backends.cudnn.enabled,
            "cudnn.benchmark": torch.backends.cudnn.benchmark,
            "cudnn.deterministic": torch.backends.cudnn.deterministic,
            "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cuda.matmul.fp16_reduced": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            "cuda.matmul.bf16_reduced": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
            "mkldnn.enabled": torch.backends.mkldnn.enabled,
        }
    return flags


PROTECTED_ENV_PREFIXES = ("CUDA_AGENT_", "PYTORCH_", "TORCH_ALLOW_TF32", "NVIDIA_TF32", "CUBLAS_", "CUDA_LAUNCH")
PROTECTED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS")


def _protected_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(PROTECTED_ENV_PREFIXES) or k in PROTECTED_ENV}


class Snapshot:
    """What the candidate must leave alone, captured before it loads."""

    def __init__(self, extra: dict[str, Any]) -> None:
        namespaces = {**_watched(), **extra}
        self.identities = {
            f"{label}.{name}": value
            for label, ns in namespaces.items()
            for name, value in list(vars(ns).items())
            if callable(value) or isinstance(value, type | types.ModuleType)
        }
        self.namespaces = namespaces
        self.flags = _backend_flags()
        self.env = _protected_env()
        self.threads = threading.active_count()

    def check(self, expected_seed: int | None) -> list[Finding]:
        findings: list[Finding] = []
        changed = [
            key
            for key, value in self.identities.items()
            if vars(self.namespaces[key.rsplit(".", 1)[0]]).get(key.rsplit(".", 1)[1], value) is not value
        ]
        timers = [k for k in changed if k.rsplit(".", 1)[0] in _TIMER_MODULES]
        torch_fns = [k for k in changed if k.startswith("torch") and k not in timers]
        harness = [k for k in changed if k not in timers and k not in torch_fns]
        for code, keys in (("timer_patched", timers), ("torch_patched", torch_fns), ("harness_patched", harness)):
            if keys:
                findings.append((code, f"candidate replaced {', '.join(sorted(keys)[:8])}"))
        flags = _backend_flags()
        diff = [f"{k}: {self.flags[k]} -> {v}" for k, v in flags.items() if self.flags.get(k) != v]
        if diff:
            findings.append(("backend_flags_changed", f"candidate changed torch backend flags: {'; '.join(diff)}"))
        env = _protected_env()
        env_diff = sorted(k for k in set(env) | set(self.env) if env.get(k) != self.env.get(k))
        if env_diff:
            findings.append(("environ_tampered", f"candidate changed environment variables {', '.join(env_diff)}"))
        if expected_seed is not None and torch.initial_seed() != expected_seed:
            findings.append(("rng_reseeded", "candidate re-seeded the torch random number generator"))
        return findings


def output_findings(
    values: list[Any],
    early: list[Any],
    given: list[Any],
    pristine: list[Any],
    previous: list[Any],
    threads: int,
) -> list[Finding]:
    """What one guarded call's outputs give away: not plain tensors, written after forward returned (``early``
    are copies taken on the current stream before a device-wide sync), inputs modified, an input or the previous
    call's output returned again, a thread left running."""
    findings: list[Finding] = []
    for v in values:
        if isinstance(v, torch.Tensor) and type(v) is not torch.Tensor:
            findings.append(("output_not_plain_tensor", f"forward returned a {type(v).__name__}, not a plain Tensor"))
        elif not isinstance(v, torch.Tensor) and hasattr(v, "__torch_function__"):
            findings.append(("output_not_plain_tensor", f"forward returned a tensor-like {type(v).__name__}"))
    if findings:
        return findings
    tensors = [v for v in values if type(v) is torch.Tensor]
    for v, e in zip(values, early, strict=True):
        if e is not None and not _equal(v, e) and not (v.isnan().any() and e.isnan().any()):
            findings.append(
                ("output_written_after_return", "the output changed after forward returned (unsynced stream or thread)")
            )
    for x, y in zip(given, pristine, strict=True):
        if isinstance(x, torch.Tensor) and not _equal(x, y):
            findings.append(("input_mutated", "forward modified its input tensors"))
    input_storages = {_storage(x).data_ptr() for x in given if isinstance(x, torch.Tensor) and x.numel()}
    if any(_storage(t).data_ptr() in input_storages for t in tensors if t.numel()):
        findings.append(("output_aliases_input", "forward returned a view or alias of an input"))
    previous_storages = {_storage(t).data_ptr() for t in previous if type(t) is torch.Tensor and t.numel()}
    if any(_storage(t).data_ptr() in previous_storages for t in tensors if t.numel()):
        findings.append(("output_buffer_reused", "forward returned the same output buffer on two calls"))
    if _active_threads() > threads:
        findings.append(("background_thread", "forward left a Python thread running"))
    return list(dict.fromkeys(findings))
