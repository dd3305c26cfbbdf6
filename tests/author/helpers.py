"""Run the author's back ends directly: plan, emit, build with g++, call the launchers through ctypes and compare
with the reference on real inputs. Fast enough for unit tests (no sandbox, no evaluation children). The CUDA back
end's row kernels run on the host through ``cuda_emulator.h`` (threads, barriers and shuffles emulated)."""

from __future__ import annotations

import ctypes
import hashlib
import re
import subprocess
import types
from pathlib import Path

import torch

from cuda_agent.author import Variant, capture_problem, plan_graph
from cuda_agent.author.emit import (
    CPU_HALF_PRELUDE,
    CUDA_HALF_PRELUDE,
    CUDA_MMA16_PRELUDE,
    CUDA_MMA_PRELUDE,
    CUDA_WGMMA_PRELUDE,
    emit_source,
    f16_scale_source,
    variant_plan,
)
from cuda_agent.author.plan import Plan

EMULATOR = Path(__file__).with_name("cuda_emulator.h")
_LAUNCH = re.compile(r"(\w+)<<<(.+?), (\d+), (\w+), stream>>>\((.*?)\);")
_STATIC_SHARED = re.compile(r"__shared__ (?:__align__\(\d+\) )?([\w<>:]+) (\w+)((?:\[\w+\])+);")


def emulated_cuda(source: str) -> str:
    """CUDA row kernels as host C++ for ``cuda_emulator.h``: launches become calls, the dynamic shared memory the
    running block's buffer, the tensor-core step the emulator's."""
    source = source.replace("#include <cuda_runtime.h>", f'#include "{EMULATOR}"').replace(CUDA_MMA_PRELUDE, "")
    source = source.replace(CUDA_MMA16_PRELUDE, "").replace(CUDA_WGMMA_PRELUDE, f16_scale_source("inline "))
    source = source.replace(CUDA_HALF_PRELUDE, CPU_HALF_PRELUDE)
    for declared, kind in (("unsigned char", "row_smem"), ("float", "tile_smem"), ("uint16_t", "mma16_smem")):
        source = re.sub(
            rf"extern __shared__ __align__\(\d+\) {declared} {kind}\[\];",
            f"{declared}* {kind} = reinterpret_cast<{declared}*>(emu_dynamic_smem);",
            source,
        )
    # (each block's own static shared arrays: cuda_emulator.h's emu_block_static)
    source = _STATIC_SHARED.sub(r"auto& \2 = emu_block_static<\1\3, __LINE__>();", source)
    return _LAUNCH.sub(r"emu_launch(\1, \2, \3, \4, \5);", source)


def run_cpu(source: str, tmp: Path) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(ours, reference) outputs of one call on seeded inputs, on the C++/OpenMP back end."""
    plan = variant_plan(plan_graph(capture_problem(source)), "cpu", Variant())
    (tmp / "k.cpp").write_text(emit_source(plan, "cpu", Variant()))
    return _run(plan, source, tmp, ["-fopenmp"])


def run_emulated_cuda(source: str, tmp: Path, variant: Variant) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(ours, reference) outputs of one call on seeded inputs, on the CUDA back end's ``variant`` emulated."""
    plan = variant_plan(plan_graph(capture_problem(source)), "cuda", variant)
    (tmp / "k.cpp").write_text(emulated_cuda(emit_source(plan, "cuda", variant)))
    return _run(plan, source, tmp, ["-std=c++20", "-pthread", "-Wno-unknown-pragmas"], stream=True)


def _run(
    plan: Plan, source: str, tmp: Path, flags: list[str], stream: bool = False
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    # A library per source: dlopen hands back the library already loaded from a path, whatever is there now.
    library = tmp / f"k-{hashlib.sha256((tmp / 'k.cpp').read_bytes()).hexdigest()[:16]}.so"
    subprocess.run(
        ["g++", "-O1", *flags, "-shared", "-fPIC", "-o", str(library), str(tmp / "k.cpp")],
        check=True,
        capture_output=True,
    )
    lib = ctypes.CDLL(str(library))
    module = types.ModuleType("author_test_problem")
    exec(compile(source, "model.py", "exec"), module.__dict__)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    with torch.no_grad():
        ref = model(*inputs)
    refs = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    buffers = plan.bind(model, inputs)
    for kernel in plan.kernels:
        args = [ctypes.c_void_p(buffers[b].data_ptr()) for b in [*kernel.reads, *kernel.writes]]
        getattr(lib, kernel.name)(*args, *([ctypes.c_void_p(None)] if stream else []))
    return [buffers[o] for o in plan.outputs], refs
