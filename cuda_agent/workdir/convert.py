"""Conversion between our project form and the workdir form, where the kernels allow it.

project -> workdir always works for a project candidate that builds: its kernels stay as they are (an
``extern "C"`` launcher is an ordinary host function there), one generated binding exposes every launcher to
Python with tensors for pointers and torch's current stream, and ``model_new.py``'s ``load_kernels`` becomes the
``cuda_extension`` module, which has the same function names.

workdir -> project works for the workspaces that conversion wrote (the generated binding and the shim are
recognized and undone). A hand-written ``kernels/*_binding.cpp`` is C++ against torch, which the project form
builds without; porting it means moving its logic (checks, allocation, sizes) into ``model_new.py`` by hand, so
the conversion refuses it, naming the files.

``complete_workspace`` adds the reference (``model.py``) and the platform's binding files, so a folder holding a
workdir candidate runs with the released environment's own scripts (``utils/``, theirs to copy in).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cuda_agent import safefs
from cuda_agent.compile.manifest import parse_launchers
from cuda_agent.contracts.candidate import (
    BINDING_SUFFIX,
    MODEL_NEW_FILE,
    WORKDIR_REFERENCE_FILE,
    CandidateForm,
    CandidateSource,
    is_kernel_file,
    is_unit,
)
from cuda_agent.workdir.layout import PLATFORM_FILES

GENERATED_BINDING = f"kernels/cuda_agent_launchers{BINDING_SUFFIX}"
_PROJECT_IMPORT = re.compile(r"^from cuda_agent\.kernels import load_kernels[ \t]*$", re.MULTILINE)
_PROJECT_IMPORT_LINE = "from cuda_agent.kernels import load_kernels"
# What replaces the import line; recognized verbatim by the reverse conversion.
SHIM = """import cuda_extension  # cuda-agent: the workdir form's module stands in for load_kernels()


def load_kernels(directory=None):  # cuda-agent: same launcher names, tensors for pointers
    return cuda_extension"""
_TORCH_DTYPES = {
    "float32": "kFloat32",
    "float64": "kFloat64",
    "float16": "kFloat16",
    "bfloat16": "kBFloat16",
    "int32": "kInt32",
    "int64": "kInt64",
    "int16": "kInt16",
    "int8": "kInt8",
    "uint8": "kUInt8",
    "uint32": "kUInt32",
    "bool": "kBool",
}


class ConversionError(ValueError):
    """The candidate cannot be converted; the message says which file stops it and why."""


def _binding_function(launcher: dict[str, Any]) -> tuple[str, str]:
    """(declaration of the launcher, the torch-facing function that calls it)."""
    name, ret, params = launcher["name"], launcher["return"], launcher["params"]
    declaration = f'extern "C" {ret} {name}({", ".join(p["ctype"] for p in params)});'
    args, checks, call = [], [], []
    for i, p in enumerate(params):
        if p["kind"] == "stream":
            call.append("c10::cuda::getCurrentCUDAStream()")
            continue
        arg = f"a{i}"
        if p["kind"] == "pointer":
            args.append(f"torch::Tensor {arg}")
            checks.append(f'  TORCH_CHECK({arg}.is_cuda(), "{name}: argument {i} must be a CUDA tensor");')
            if p["dtype"] is not None:
                dtype = _TORCH_DTYPES[p["dtype"]]
                must = f'"{name}: argument {i} must be {p["dtype"]}"'
                checks.append(f"  TORCH_CHECK({arg}.scalar_type() == torch::{dtype}, {must});")
            call.append(f"static_cast<{p['ctype']}>({arg}.data_ptr())")
        else:
            args.append(f"{p['base']} {arg}")
            call.append(arg)
    invoke = f"{name}({', '.join(call)})"
    if ret == "void":
        body, result = f"  {invoke};", "void"
    elif ret == "cudaError_t":
        body = f'  cudaError_t err = {invoke};\n  TORCH_CHECK(err == cudaSuccess, "{name}: ", cudaGetErrorString(err));'
        result = "void"
    else:
        body, result = f"  return {invoke};", "int64_t"
    function = f"static {result} bind_{name}({', '.join(args)}) {{\n" + "\n".join([*checks, body]) + "\n}"
    return declaration, function


def project_to_workdir(candidate: CandidateSource) -> CandidateSource:
    """The workdir form of a project candidate (see the module doc)."""
    if candidate.form is not CandidateForm.PROJECT:
        raise ConversionError(f"expected a project candidate, got {candidate.form.value}")
    if not _PROJECT_IMPORT.search(candidate.model_new):
        raise ConversionError(f"{MODEL_NEW_FILE}: converts only with the line `{_PROJECT_IMPORT_LINE}`")
    if GENERATED_BINDING in candidate.files:
        raise ConversionError(f"{GENERATED_BINDING}: the name of the generated binding is taken")
    launchers = []
    for name, text in sorted(candidate.files.items()):
        if is_unit(name):
            found, problems = parse_launchers(name, text)
            if problems:
                raise ConversionError(f"{name}: {problems[0].message}")
            launchers += found
    if not launchers:
        raise ConversionError('no extern "C" launcher to bind')
    declarations, functions = zip(*(_binding_function(launcher) for launcher in launchers), strict=True)
    defs = "\n".join(f'  m.def("{f["name"]}", &bind_{f["name"]});' for f in launchers)
    binding = "\n".join(
        [
            "// Generated by cuda-agent from the project form's launchers.",
            "#include <torch/extension.h>",
            "#include <c10/cuda/CUDAStream.h>",
            "#include <cuda_bf16.h>",
            "#include <cuda_fp16.h>",
            "#include <cuda_runtime.h>",
            "",
            '#include "../binding_registry.h"',
            "",
            *declarations,
            "",
            "\n\n".join(functions),
            "",
            "static void register_cuda_agent_launchers(pybind11::module& m) {",
            defs,
            "}",
            "",
            "REGISTER_BINDING(cuda_agent_launchers, register_cuda_agent_launchers);",
            "",
        ]
    )
    files = dict(candidate.files)
    files[MODEL_NEW_FILE] = _PROJECT_IMPORT.sub(lambda _: SHIM, candidate.model_new, count=1)
    files[GENERATED_BINDING] = binding
    return CandidateSource(form=CandidateForm.WORKDIR, files=files)


def workdir_to_project(candidate: CandidateSource) -> CandidateSource:
    """The project form of a workdir candidate whose bindings were generated by ``project_to_workdir``."""
    if candidate.form is not CandidateForm.WORKDIR:
        raise ConversionError(f"expected a workdir candidate, got {candidate.form.value}")
    written = sorted(n for n in candidate.files if n.endswith(BINDING_SUFFIX) and n != GENERATED_BINDING)
    if written:
        raise ConversionError(
            f"{', '.join(written)}: hand-written torch bindings do not convert (the project form builds without "
            "torch headers); move their checks and allocations into model_new.py and export the launchers "
            'with extern "C"'
        )
    if GENERATED_BINDING not in candidate.files or SHIM not in candidate.model_new:
        raise ConversionError(f"{MODEL_NEW_FILE}: not written by the project -> workdir conversion")
    files = {n: t for n, t in candidate.files.items() if n != GENERATED_BINDING}
    files[MODEL_NEW_FILE] = candidate.model_new.replace(SHIM, _PROJECT_IMPORT_LINE, 1)
    return CandidateSource(form=CandidateForm.PROJECT, files=files)


def complete_workspace(root: Path, problem_source: str) -> None:
    """Add the reference and the platform's binding files to the folder ``root`` holding a workdir candidate."""
    safefs.write_text(root, WORKDIR_REFERENCE_FILE, problem_source)
    for name, text in PLATFORM_FILES.items():
        safefs.write_text(root, name, text)


def write_workspace(candidate: CandidateSource, problem_source: str, root: Path) -> CandidateSource:
    """Write ``candidate`` (converted when it is a project candidate) as a complete workspace under ``root``; the
    workdir candidate written."""
    workdir = project_to_workdir(candidate) if candidate.form is CandidateForm.PROJECT else candidate
    if workdir.form is not CandidateForm.WORKDIR:
        raise ConversionError(f"a {candidate.form.value} candidate does not convert to the workdir form")
    for name, text in workdir.files.items():
        if name != MODEL_NEW_FILE and not is_kernel_file(name):
            raise ConversionError(f"{name}: not a file of the workdir form")
        safefs.write_text(root, name, text)
    complete_workspace(root, problem_source)
    return workdir
