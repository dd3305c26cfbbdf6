"""Compiler and linker flags of the workdir form: what ``torch.utils.cpp_extension.load(name="cuda_extension")``
passes, so kernels written for the released environment build here unchanged, and the precompiled header of the
torch includes their bindings use."""

from __future__ import annotations

import importlib.util
import sysconfig
from functools import cache
from pathlib import Path

from cuda_agent.contracts.candidate import EXTENSION_MODULE

# The workdir form's <torch/extension.h>: the tensor library (ATen, allocation, TensorOptions, TORCH_CHECK) and the
# pybind11 casters for tensors, without the C++ frontend (torch::nn, optim, data, serialization) that the full
# header adds. Bindings under the paper rules use nothing else (torch compute is refused), and this is what makes
# a binding cheap to compile: g++ loads a precompiled header in time proportional to its size, and the full
# header's is 800 MB (about 15 s per unit) where this one's is about 500 MB.
EXTENSION_HEADER = "torch/extension.h"
EXTENSION_HEADER_TEXT = """\
// cuda-agent workdir form: torch/extension.h without the C++ frontend (torch::nn, optim, data).
#pragma once
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
"""
# What the precompiled header holds: the header above and the stream accessor bindings use.
PCH_HEADER_NAME = "cuda_agent_torch_pch.h"
PCH_HEADER_TEXT = "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n#include <c10/cuda/CUDAStream.h>\n"

# torch.utils.cpp_extension.COMMON_NVCC_FLAGS (read without importing torch): the half/bfloat16 operator macros that
# load() sets, which decide whether kernels written for it compile.
NVCC_TORCH_FLAGS = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
)
# torch's headers need C++20 (load() passes it too).
CXX_STANDARD = "c++20"
# Libraries a torch extension links (load() links the same; torch_python provides the pybind11 casters).
TORCH_LIBRARIES = ("c10", "torch", "torch_cpu", "torch_python", "c10_cuda", "torch_cuda")


@cache
def torch_dir() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise OSError("torch is not installed: the workdir form builds against its headers")
    return Path(spec.origin).parent


@cache
def cxx11_abi() -> int:
    """The libstdc++ ABI torch was built with; a mismatch makes std::string arguments undefined at import."""
    import torch

    return int(torch._C._GLIBCXX_USE_CXX11_ABI)


def include_flags() -> list[str]:
    """torch's and Python's headers as system headers (their warnings are not the candidate's)."""
    root = torch_dir() / "include"
    dirs = [root, root / "torch" / "csrc" / "api" / "include", Path(sysconfig.get_paths()["include"])]
    return [flag for d in dirs for flag in ("-isystem", str(d))]


def define_flags() -> list[str]:
    return [
        f"-DTORCH_EXTENSION_NAME={EXTENSION_MODULE}",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        f"-D_GLIBCXX_USE_CXX11_ABI={cxx11_abi()}",
    ]


def link_flags() -> list[str]:
    """nvcc link flags for the torch libraries; the rpath lets the evaluation child load them from the wheel."""
    lib = torch_dir() / "lib"
    return [f"-L{lib}", f"-Xlinker=-rpath={lib}", *(f"-l{name}" for name in TORCH_LIBRARIES), "--cudart=shared"]
