"""Build-time benchmark of the workdir form: our cached, precompiled-header build next to
``torch.utils.cpp_extension.load`` (what the released environment's compile script calls) on the same files.

Figures, in seconds:
    once_s                what the first workdir build on a machine adds, once per toolchain and flags: the torch
                          precompiled header and the platform's binding.cpp object (about 0 when cached)
    cold_s                every object of the candidate compiled, the precompiled header and binding.cpp present
    edit_kernel_s         one kernels/*.cu edited: one object and the link
    edit_binding_s        one kernels/*_binding.cpp edited: one object (through the header) and the link
    load_cold_s           load() from an empty build directory
    load_edit_kernel_s    load() after the same .cu edit (ninja rebuilds one object and links)
    load_edit_binding_s   load() after the same binding edit
    pch_used              whether g++ took the precompiled header for the binding (false: the torch headers were
                          parsed, and every figure above but the kernel edit is that much slower)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cuda_agent.compile.builder import compile_candidate
from cuda_agent.compile.libraries import link_flags, vendor_libraries
from cuda_agent.compile.toolchain import resolve_arch, torch_arch_list
from cuda_agent.contracts.candidate import BINDING_SUFFIX, CandidateForm, CandidateSource, read_candidate_dir
from cuda_agent.contracts.common import CompileStatus, Device
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.workdir import flags
from cuda_agent.workdir.layout import PLATFORM_FILES

# Run in a fresh interpreter so every load() pays what the released environment's compile script pays (less the
# interpreter start, which is not timed).
_LOAD_SCRIPT = """
import json, sys, time
from torch.utils.cpp_extension import load
args = json.loads(sys.argv[1])
started = time.monotonic()
load(name="cuda_extension", sources=args["sources"], build_directory=args["build"], extra_cflags=["-O3"],
     extra_cuda_cflags=["-O3"], extra_ldflags=args["ldflags"], extra_include_paths=args["includes"], verbose=False)
print(json.dumps({"seconds": time.monotonic() - started}))
"""


def _edited(candidate: CandidateSource, name: str, marker: str) -> CandidateSource:
    files = dict(candidate.files)
    files[name] = files[name] + f"\n// {marker}\n"
    return CandidateSource(form=candidate.form, files=files)


def _build(candidate: CandidateSource) -> tuple[float, CompileResult]:
    started = time.monotonic()
    result = compile_candidate(CompileRequest(candidate=candidate))
    if result.status is not CompileStatus.OK:
        raise RuntimeError(f"workdir build failed: {result.message}")
    return time.monotonic() - started, result


def _load(workspace: Path, build: Path, libraries_ldflags: list[str], includes: list[str]) -> float:
    units = sorted(str(p) for p in (workspace / "kernels").iterdir() if p.suffix in (".cu", ".cpp"))
    sources = [str(workspace / "binding.cpp"), *units]
    args = {"sources": sources, "build": str(build), "ldflags": libraries_ldflags, "includes": includes}
    # The arch our builds target (load() asks the GPU otherwise, and there may be none).
    arch_list = torch_arch_list(resolve_arch(None))
    env = {**os.environ, "MAX_JOBS": str(os.cpu_count() or 1), "TORCH_CUDA_ARCH_LIST": arch_list}
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD_SCRIPT, json.dumps(args)], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cpp_extension.load failed: {proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])


def run_workdir_build_benchmark(workspace: Path, include_load: bool = True) -> dict[str, Any]:
    """Build-time figures for the workspace at ``workspace`` (model_new.py + kernels/); see the module doc."""
    base = read_candidate_dir(workspace, CandidateForm.WORKDIR)
    kernel = next((n for n in sorted(base.files) if n.endswith(".cu")), None)
    binding = next((n for n in sorted(base.files) if n.endswith(BINDING_SUFFIX)), None)
    if kernel is None or binding is None:
        raise ValueError(f"{workspace}: the benchmark needs a kernels/*.cu and a kernels/*{BINDING_SUFFIX}")
    run = f"bench {time.time_ns()}"
    figures: dict[str, Any] = {"workspace": str(workspace), "cpus": os.cpu_count()}
    # The precompiled header is shared by every build with the same flags: time it apart from the first build by
    # building the workspace twice with fresh markers everywhere.
    first = CandidateSource(form=base.form, files={n: t + f"\n// {run} a\n" for n, t in base.files.items()})
    total_first, _ = _build(first)
    cold = CandidateSource(form=base.form, files={n: t + f"\n// {run} b\n" for n, t in base.files.items()})
    figures["cold_s"], _ = _build(cold)
    figures["once_s"] = max(total_first - figures["cold_s"], 0.0)
    figures["edit_kernel_s"], _ = _build(_edited(cold, kernel, f"{run} c"))
    figures["edit_binding_s"], edited = _build(_edited(cold, binding, f"{run} d"))
    # g++ says under -Winvalid-pch when it parses the torch headers instead of loading the precompiled ones.
    figures["pch_used"] = ".gch" not in edited.log
    if include_load:
        libraries, _ = vendor_libraries(Device.CUDA, base.files, by_include=True)
        ldflags = [f.replace("-Xlinker=", "-Wl,") for f in link_flags(libraries)]
        includes = sorted({str(lib.include_dir) for lib in libraries})
        with tempfile.TemporaryDirectory() as tmp:
            # Only the files read through the candidate reader (cold) and the platform's own: the workspace folder
            # itself may hold links or special files that a copy would follow.
            root = Path(tmp) / "workspace"
            files = {**PLATFORM_FILES, **cold.files}
            for name, text in files.items():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_text(text)
            (Path(tmp) / "build").mkdir()
            figures["load_cold_s"] = _load(root, Path(tmp) / "build", ldflags, includes)
            for what, name, marker in (("kernel", kernel, "c"), ("binding", binding, "d")):
                (root / name).write_text(files[name] + f"\n// {run} {marker}\n")
                figures[f"load_edit_{what}_s"] = _load(root, Path(tmp) / "build", ldflags, includes)
        figures["cold_over_load"] = figures["cold_s"] / figures["load_cold_s"]
    figures["torch_include"] = str(flags.torch_dir() / "include")
    return figures
