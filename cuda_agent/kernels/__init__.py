"""The fixed binding between a candidate's ``model_new.py`` and its compiled kernels (PROJECT form).

``load_kernels()`` opens the shared library the compile service built from ``kernels/*.cu|*.cpp`` and returns an
object whose attributes are the library's exported ``extern "C"`` launchers, described by ``manifest.json``.
Calling one checks and converts the arguments (tensors -> data pointers, Python numbers -> C scalars) and, for
a launcher whose last parameter is ``cudaStream_t``, appends torch's current CUDA stream. Binding is ctypes
only: no torch headers and no compilation at load time. Candidates cannot edit this module.

The library may need vendor libraries the candidate declared (``cuda_agent.compile.libraries``, e.g. cuBLAS): the
loader takes the copy torch has already loaded under the same soname, else the one its RUNPATH names.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cuda_agent.kernels.types import LIBRARY_NAME, MANIFEST_NAME, MANIFEST_VERSION, SCALAR_CTYPES

__all__ = [
    "KernelFunction",
    "KernelLibrary",
    "KernelsError",
    "launch_count",
    "load_kernels",
    "reset_launch_count",
    "set_launch_hook",
]

ENV_DIR = "CUDA_AGENT_KERNELS_DIR"

_lock = threading.Lock()
_launches = 0
_launch_hook: Callable[[bool, int | None], None] | None = None
_loaded: dict[str, KernelLibrary] = {}


class KernelsError(RuntimeError):
    """A launcher was called or loaded wrongly; the message names the function and the argument."""


def launch_count() -> int:
    """Number of launcher calls in this process; eval uses it to prove a custom kernel ran."""
    return _launches


def reset_launch_count() -> None:
    global _launches
    with _lock:
        _launches = 0


def set_launch_hook(hook: Callable[[bool, int | None], None] | None) -> None:
    """Have ``hook(before, stream)`` called right before (True) and after (False) every launcher call, with the
    raw CUDA stream it launches on (None: the default stream). The evaluation harness times launches with it."""
    global _launch_hook
    _launch_hook = hook


def _count_launch() -> None:
    global _launches
    with _lock:
        _launches += 1


class KernelFunction:
    """One exported launcher. Call it with the C parameters in order; the stream may be left out."""

    def __init__(self, library: KernelLibrary, spec: dict[str, Any]) -> None:
        self.name: str = spec["name"]
        self.params: list[dict[str, Any]] = spec["params"]
        self.returns: str = spec["return"]
        self._device = library.device
        self._takes_stream = bool(self.params) and self.params[-1]["kind"] == "stream"
        fn = getattr(library.handle, self.name)
        fn.argtypes = [SCALAR_CTYPES[p["base"]] if p["kind"] == "scalar" else ctypes.c_void_p for p in self.params]
        fn.restype = None if self.returns == "void" else ctypes.c_int
        self._fn = fn

    def __repr__(self) -> str:
        args = ", ".join(f"{p['ctype']} {p['name']}".strip() for p in self.params)
        return f"<kernel {self.returns} {self.name}({args})>"

    def __call__(self, *args: Any) -> int | None:
        import torch

        n = len(self.params)
        if self._takes_stream and len(args) == n - 1:
            args = (*args, None)
        if len(args) != n:
            expected = f"{n - 1} or {n}" if self._takes_stream else str(n)
            raise KernelsError(f"{self.name}: expected {expected} arguments, got {len(args)}")
        cuda_device: torch.device | None = None
        converted: list[Any] = []
        for i, (param, value) in enumerate(zip(self.params, args, strict=True)):
            where = f"{self.name}: argument {i} ({param['ctype']} {param['name']})".rstrip()
            kind = param["kind"]
            if kind == "pointer":
                ptr, dev = self._pointer(param, value, where, torch)
                if dev is not None and dev.type == "cuda":
                    cuda_device = cuda_device or dev
                converted.append(ptr)
            elif kind == "scalar":
                if isinstance(value, torch.Tensor):
                    raise KernelsError(f"{where}: pass a Python number, not a tensor (int(t) / float(t))")
                converted.append(self._scalar(param, value, where))
            else:
                converted.append(value)  # stream; resolved below once the device is known
        if self._takes_stream:
            converted[-1] = self._stream(converted[-1], cuda_device, torch)
        _count_launch()
        hook = _launch_hook if cuda_device is not None else None
        stream = converted[-1] if self._takes_stream else None
        if hook is not None:
            hook(True, stream)
        if (
            cuda_device is not None
            and cuda_device.index is not None
            and torch.cuda.current_device() != cuda_device.index
        ):
            with torch.cuda.device(cuda_device):
                result = self._fn(*converted)
        else:
            result = self._fn(*converted)
        if hook is not None:
            hook(False, stream)
        if self.returns == "cudaError_t" and result:
            raise KernelsError(f"{self.name} returned cudaError_t {result}")
        return result

    def _pointer(self, param: dict[str, Any], value: Any, where: str, torch: Any) -> tuple[int | None, Any]:
        if value is None:
            return None, None
        if not isinstance(value, torch.Tensor):
            raise KernelsError(f"{where}: expected a tensor, got {type(value).__name__}")
        if value.device.type != self._device:
            raise KernelsError(f"{where}: tensor is on {value.device}, this library runs on {self._device}")
        dtype = param.get("dtype")
        if dtype is not None and value.dtype != getattr(torch, dtype):
            raise KernelsError(f"{where}: tensor dtype is {value.dtype}, the C type needs torch.{dtype}")
        if not value.is_contiguous():
            raise KernelsError(f"{where}: tensor is not contiguous; call .contiguous() first")
        return value.data_ptr(), value.device

    @staticmethod
    def _scalar(param: dict[str, Any], value: Any, where: str) -> Any:
        base = param["base"]
        if base in ("float", "double"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise KernelsError(f"{where}: expected a float, got {type(value).__name__}")
            return float(value)
        if base == "bool":
            return bool(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise KernelsError(f"{where}: expected an int, got {type(value).__name__}")
        return value

    @staticmethod
    def _stream(value: Any, device: Any, torch: Any) -> int:
        if value is None:
            return int(torch.cuda.current_stream(device).cuda_stream)
        if isinstance(value, torch.cuda.Stream):
            return int(value.cuda_stream)
        if isinstance(value, int):
            return value
        raise KernelsError(f"stream must be a torch.cuda.Stream, a raw handle or omitted, got {type(value).__name__}")


class KernelLibrary:
    """The loaded library; attributes are its launchers (``lib.add(a, b, out, n)``)."""

    def __init__(self, directory: Path) -> None:
        manifest_path = directory / MANIFEST_NAME
        try:
            manifest = json.loads(manifest_path.read_text())
        except FileNotFoundError:
            raise KernelsError(f"no {MANIFEST_NAME} in {directory}: was the candidate compiled?") from None
        if manifest.get("version") != MANIFEST_VERSION:
            raise KernelsError(f"{manifest_path}: manifest version {manifest.get('version')} is not supported")
        self.directory = directory
        self.device: str = manifest["device"]
        try:
            self.handle = ctypes.CDLL(str(directory / manifest.get("library", LIBRARY_NAME)), mode=os.RTLD_LOCAL)
        except OSError as exc:
            raise KernelsError(f"cannot load kernel library: {exc}") from None
        self.functions: dict[str, KernelFunction] = {}
        for spec in manifest["functions"]:
            try:
                self.functions[spec["name"]] = KernelFunction(self, spec)
            except AttributeError:
                raise KernelsError(f"undefined symbol {spec['name']} in {directory / LIBRARY_NAME}") from None

    def __getattr__(self, name: str) -> KernelFunction:
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"no exported launcher {name!r}; available: {', '.join(sorted(functions)) or 'none'}")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.__dict__.get("functions", {})))


def load_kernels(directory: str | Path | None = None) -> KernelLibrary:
    """Open the compiled kernels in ``directory`` (default: $CUDA_AGENT_KERNELS_DIR); cached per process."""
    if directory is None:
        env = os.environ.get(ENV_DIR)
        if not env:
            raise KernelsError(f"{ENV_DIR} is not set and no directory was given")
        directory = env
    key = os.path.realpath(directory)
    with _lock:
        lib = _loaded.get(key)
    if lib is None:
        lib = KernelLibrary(Path(key))
        with _lock:
            _loaded.setdefault(key, lib)
    return lib
