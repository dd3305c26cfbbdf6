"""Vendor libraries a PROJECT candidate may link: the allow-list, how a candidate declares them, where they are found.

A candidate declares a library in any of its kernel files with the MSVC convention ``#pragma comment(lib, "cublas")``;
nvcc and g++ ignore the pragma, so the declaration lives in the source that needs the library and no new file kind
is needed. Only the CUDA math libraries below (and cuDNN) are allowed; they are looked up in the toolkit
(``<cuda_home>/lib64``) and then in the ``nvidia`` wheels torch's CUDA build depends on (a pip-installed toolkit ships
them there, not in ``lib64``). Linking the copy torch loads keeps one cuBLAS in the evaluation process: the loader
reuses an already loaded library of the same soname.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.compile.manifest import blank_comments, included, line_of
from cuda_agent.contracts.common import Device
from cuda_agent.contracts.compile import Diagnostic
from cuda_agent.settings import get_settings

# Library -> headers that need it linked. curand_kernel.h is device-side and header-only, so it needs nothing.
# cuDNN is not in the toolkit: it is found in the nvidia-cudnn wheel torch's CUDA build depends on.
ALLOWED_LIBRARIES: dict[str, tuple[str, ...]] = {
    "cublas": ("cublas_v2.h", "cublas_api.h", "cublas.h"),
    "cublasLt": ("cublasLt.h",),
    "curand": ("curand.h",),
    "cufft": ("cufft.h", "cufftXt.h"),
    "cusparse": ("cusparse.h",),
    "cusolver": ("cusolverDn.h", "cusolverSp.h", "cusolver_common.h"),
    "cudnn": ("cudnn.h", "cudnn_cnn.h", "cudnn_ops.h", "cudnn_graph.h", "cudnn_backend.h"),
}
_ALLOWED_TEXT = ", ".join(ALLOWED_LIBRARIES)
_HINT = f'declare it in a kernel file with #pragma comment(lib, "NAME"); NAME one of {_ALLOWED_TEXT}'

_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+comment[ \t]*\((?P<args>[^)\n]*)\)", re.MULTILINE)
_LIB_ARGS = re.compile(r'^\s*lib\s*,\s*"(?P<name>[^"]*)"\s*$')


@dataclass(frozen=True)
class VendorLibrary:
    """One declared library, resolved to the shared object the build links and its headers."""

    name: str
    shared_object: Path  # the file linked; its soname becomes the NEEDED entry
    include_dir: Path

    @property
    def lib_dir(self) -> Path:
        return self.shared_object.parent

    def fingerprint(self) -> str:
        """Part of the cache key: another copy or version of the library must rebuild."""
        real = self.shared_object.resolve()
        return f"{real}:{real.stat().st_size}"


def _scan(path: str, source: str) -> tuple[dict[str, int], dict[str, int], list[Diagnostic]]:
    """One file's declared libraries and the libraries its #includes need (name -> line), and diagnostics for
    declared names outside the allow-list."""
    text = blank_comments(source)
    declared: dict[str, int] = {}
    needed: dict[str, int] = {}
    problems: list[Diagnostic] = []
    for m in _PRAGMA.finditer(text):
        args = _LIB_ARGS.match(m.group("args"))
        if args is None:
            continue  # another pragma comment kind (e.g. "user"); nothing to link
        name, line = args.group("name"), line_of(text, m.start())
        if name in ALLOWED_LIBRARIES:
            declared.setdefault(name, line)
        else:
            problems.append(
                Diagnostic(
                    file=path,
                    line=line,
                    code="bad_library",
                    message=f"library {name!r} is not allowed; allowed: {_ALLOWED_TEXT}",
                    hint=_HINT,
                )
            )
    for header, line in included(source):
        for name, headers in ALLOWED_LIBRARIES.items():
            if header in headers:
                needed.setdefault(name, line)
    return declared, needed, problems


def _search_dirs() -> list[tuple[Path, Path]]:
    """(library dir, include dir) pairs in lookup order: the toolkit, then the nvidia wheels."""
    home = get_settings().cuda_home
    dirs = [(home / "lib64", home / "include")]
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        dirs += [(lib, lib.parent / "include") for lib in sorted(Path(root).glob("*/lib"))]
    return dirs


def _resolve(name: str) -> VendorLibrary | None:
    for lib_dir, include_dir in _search_dirs():
        plain = lib_dir / f"lib{name}.so"
        # Wheels ship only the versioned file (libcublas.so.13); the highest version is the one torch loads.
        found = [plain] if plain.is_file() else sorted(lib_dir.glob(f"lib{name}.so.[0-9]*"), key=_version_key)[-1:]
        if found:
            return VendorLibrary(name=name, shared_object=found[0], include_dir=include_dir)
    return None


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in path.name.split(".so.", 1)[1].split(".") if p.isdigit())


def vendor_libraries(
    device: Device, kernel_files: Mapping[str, str], by_include: bool = False
) -> tuple[list[VendorLibrary], list[Diagnostic]]:
    """The libraries the candidate's kernel files declare, resolved; or diagnostics (code ``bad_library``).

    ``by_include``: the workdir form's rules: a vendor header declares its library (its environment links what
    the kernels include and has no pragma convention)."""
    declared: dict[str, tuple[str, int]] = {}
    needed: dict[str, tuple[str, int]] = {}
    problems: list[Diagnostic] = []
    for path, source in sorted(kernel_files.items()):
        file_declared, file_needed, bad = _scan(path, source)
        problems += bad
        for name, line in file_declared.items():
            declared.setdefault(name, (path, line))
        for name, line in file_needed.items():
            needed.setdefault(name, (path, line))
            if by_include:
                declared.setdefault(name, (path, line))
    if device is not Device.CUDA and (declared or needed):
        path, line = next(iter({**needed, **declared}.values()))
        names = ", ".join(dict.fromkeys([*declared, *needed]))
        message = f"device {device.value} builds C++ with OpenMP only: CUDA libraries ({names}) cannot be linked"
        return [], [*problems, Diagnostic(file=path, line=line, code="bad_library", message=message)]
    # A vendor header without the declaration would fail later as a missing header or an undefined reference;
    # saying what to declare is more useful.
    for name, (path, line) in needed.items():
        if name not in declared:
            problems.append(
                Diagnostic(
                    file=path,
                    line=line,
                    code="bad_library",
                    message=f'this header needs {name} linked: add #pragma comment(lib, "{name}")',
                    hint=_HINT,
                )
            )
    if problems:
        return [], problems
    libraries = []
    for name, (path, line) in declared.items():
        resolved = _resolve(name)
        if resolved is None:
            problems.append(
                Diagnostic(
                    file=path,
                    line=line,
                    code="bad_library",
                    message=f"library {name} is allowed but this toolkit does not ship it "
                    f"(looked in {', '.join(str(d) for d, _ in _search_dirs())})",
                )
            )
        else:
            libraries.append(resolved)
    return ([], problems) if problems else (libraries, [])


def include_flags(libraries: list[VendorLibrary]) -> list[str]:
    """The headers of libraries found outside the toolkit. -isystem, so the toolkit's own headers (-I, nvcc's
    default) still win over a wheel's copies of them; the toolkit's include dir is on the path already, and naming
    it again with -isystem would demote it to a system dir."""
    toolkit = (get_settings().cuda_home / "include").resolve()
    dirs = dict.fromkeys(str(lib.include_dir) for lib in libraries if lib.include_dir.resolve() != toolkit)
    return [flag for d in dirs for flag in ("-isystem", d)]


def link_flags(libraries: list[VendorLibrary]) -> list[str]:
    """nvcc link flags. ``-l:FILE`` links the exact file found; the rpath lets the evaluation child, whose sandbox
    binds the toolkit and the Python installation read-only, find it without LD_LIBRARY_PATH."""
    flags: list[str] = []
    for lib_dir in dict.fromkeys(str(lib.lib_dir) for lib in libraries):
        flags += [f"-L{lib_dir}", f"-Xlinker=-rpath={lib_dir}"]
    return flags + [f"-l:{lib.shared_object.name}" for lib in libraries]


NO_CUSTOM_KERNEL_MESSAGE = (
    "the candidate links vendor libraries but defines no __global__ kernel of its own: at least one kernel "
    "compiled from kernels/*.cu must do part of the work, a vendor library call alone does not count"
)
