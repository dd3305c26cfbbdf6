"""Where the CUDA toolkit is. torch guesses CUDA_HOME from nvcc's location, which is wrong when nvcc is a wrapper
script (e.g. /usr/local/bin/nvcc): we prefer CUDA_HOME, then the standard install path, then PATH."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def cuda_home() -> Path | None:
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and (Path(candidate) / "bin" / "nvcc").exists():
            return Path(candidate)
    nvcc = shutil.which("nvcc")
    if nvcc is not None:
        resolved = Path(nvcc).resolve()
        if resolved.parent.name == "bin" and (resolved.parent.parent / "include" / "cuda.h").exists():
            return resolved.parent.parent
    return None


def find_nvcc() -> Path | None:
    home = cuda_home()
    return home / "bin" / "nvcc" if home is not None else None
