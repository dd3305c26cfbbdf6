"""Compilers, their versions (part of every cache key), the target arch and the flag allow-list."""

from __future__ import annotations

import importlib.metadata
import logging
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from cuda_agent.settings import get_settings

log = logging.getLogger(__name__)

# Builds target one GPU model (the detected one, else Hopper), so they take its arch-specific instructions too
# (sm_90a: wgmma, setmaxnreg), which a build for sm_90 refuses; either build runs on compute capability 9.0 only.
DEFAULT_ARCH = "sm_90a"
ARCH_SPECIFIC = frozenset({9})


class FlagError(ValueError):
    """An extra flag outside the allow-list; the message names it."""


def nvcc_path() -> Path:
    return get_settings().cuda_home / "bin" / "nvcc"


def _first_line_matching(argv: list[str], pattern: str) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "missing"
    for line in out.splitlines():
        if re.search(pattern, line):
            return line.strip()
    return out.strip().splitlines()[0] if out.strip() else "unknown"


@cache
def nvcc_version() -> str:
    return (
        _first_line_matching([str(nvcc_path()), "--version"], r"release|Build") if nvcc_path().exists() else "missing"
    )


@cache
def gxx_version() -> str:
    gxx = shutil.which("g++")
    return _first_line_matching([gxx, "--version"], r"g\+\+") if gxx else "missing"


@cache
def torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "missing"


@cache
def _detected_arch() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            index = get_settings().gpu_index or 0
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(index))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no GPU, no library: all mean "not detectable here"
        return None
    return f"sm_{major}{minor}{'a' if major in ARCH_SPECIFIC and minor == 0 else ''}"


def resolve_arch(requested: str | None) -> str:
    arch = requested or get_settings().cuda_arch or _detected_arch() or DEFAULT_ARCH
    if not re.fullmatch(r"sm_\d{2,3}[af]?", arch):
        raise FlagError(f"invalid arch {arch!r}: expected e.g. sm_90 or sm_90a")
    return arch


def torch_arch_list(arch: str) -> str:
    """TORCH_CUDA_ARCH_LIST entry for an nvcc arch: sm_90a -> 9.0a."""
    digits, suffix = re.fullmatch(r"sm_(\d+)([af]?)", arch).groups()  # type: ignore[union-attr]
    return f"{digits[:-1]}.{digits[-1]}{suffix}"


# Flags an agent may add. Anything that moves outputs, pulls in files by absolute path or loads plugins is out.
_ALLOWED = re.compile(
    r"""^(
      -O[0-3s]? | -g | -G | -lineinfo | -w | -Wall | -Wextra | -Wno-[\w-]+ | -Werror
    | -D[A-Za-z_]\w*(=[\w.+-]*)? | -U[A-Za-z_]\w*
    | -std=c\+\+(14|17|20) | --std=c\+\+(14|17|20)
    | -?-use_fast_math | --use-fast-math | -ftz=(true|false) | -prec-div=(true|false) | -prec-sqrt=(true|false)
    | -fmad=(true|false) | --extended-lambda | --expt-relaxed-constexpr | --expt-extended-lambda
    | -?-maxrregcount=\d+ | --restrict | -Xptxas=-?-?[\w=,.-]+ | --ptxas-options=-?-?[\w=,.-]+
    | -arch=sm_\d{2,3}[af]? | --gpu-architecture=sm_\d{2,3}[af]?
    | -ffast-math | -funroll-loops | -march=native | -mtune=native | -mavx2? | -mavx512f | -mfma | -fopenmp(-simd)?
    | -fno-strict-aliasing | -fPIC
    )$""",
    re.VERBOSE,
)


def check_flags(flags: list[str]) -> tuple[list[str], str | None]:
    """(flags without any -arch, the arch they ask for). Raises FlagError naming the first refused flag."""
    kept: list[str] = []
    arch: str | None = None
    for flag in flags:
        if not _ALLOWED.match(flag):
            raise FlagError(f"extra flag {flag!r} is not allowed (see the candidate contract for the allow-list)")
        if flag.startswith(("-arch=", "--gpu-architecture=")):
            arch = flag.split("=", 1)[1]
        else:
            kept.append(flag)
    return kept, arch
