"""Building the workdir form here (nvcc and g++, no GPU): the four workspaces written for this project build into
a `cuda_extension` that imports and exposes what their bindings registered; an edit rebuilds one object; a
converted project candidate builds; contract breaches are refused before any compiler runs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cuda_agent.compile import artifact_dir
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource, read_candidate_dir
from cuda_agent.contracts.common import CompileStatus
from cuda_agent.contracts.compile import CompileResult
from cuda_agent.workdir.convert import project_to_workdir
from tests.workdir.conftest import NAMES, workspace

Build = Callable[[CandidateSource], CompileResult]
REGISTERED = {
    "elementwise": ["silu_forward"],
    "reduction": ["row_sum"],
    "gemm_cublas": ["linear_relu"],
    "conv_cudnn": ["conv_relu"],
}
_LIST = (
    "import sys, json, torch; sys.path.insert(0, sys.argv[1]); import cuda_extension; "
    "print(json.dumps(sorted(n for n in dir(cuda_extension) if not n.startswith('_'))))"
)


def module_functions(result: CompileResult) -> list[str]:
    """The names the built module defines, imported in a fresh interpreter (CUDA libraries load without a GPU)."""
    assert result.artifact_key is not None
    directory = artifact_dir(result.artifact_key) / "extension"
    proc = subprocess.run([sys.executable, "-c", _LIST, str(directory)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def objects(cache: Path) -> set[str]:
    return {p.name for p in (cache / "compile_cache" / "objects").glob("*.o")}


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_workspace_builds_into_cuda_extension(name: str, build: Build) -> None:
    result = build(workspace(name))
    assert result.status is CompileStatus.OK, (result.message, result.log[-3000:])
    assert module_functions(result) == REGISTERED[name]
    assert "not used because" not in result.log  # g++ took the precompiled torch header


@pytest.mark.slow
def test_an_edit_rebuilds_one_object(build: Build, shared_cache: Path) -> None:
    base = workspace("elementwise")
    assert build(base).status is CompileStatus.OK
    before = objects(shared_cache)
    files = {**base.files, "kernels/silu.cu": base.files["kernels/silu.cu"] + "\n// an edit\n"}
    edited = build(CandidateSource(form=CandidateForm.WORKDIR, files=files))
    assert edited.status is CompileStatus.OK and not edited.cache_hit, edited.message
    # The edited kernel's object only: binding.cpp and the binding are reused, then one link.
    assert len(objects(shared_cache) - before) == 1


@pytest.mark.slow
def test_a_converted_project_candidate_builds(build: Build) -> None:
    project = read_candidate_dir(Path(__file__).parent / "projects" / "reduction", CandidateForm.PROJECT)
    result = build(project_to_workdir(project))
    assert result.status is CompileStatus.OK, (result.message, result.log[-3000:])
    assert module_functions(result) == ["row_sum"]


def refused(build: Build, files: dict[str, str]) -> CompileResult:
    result = build(CandidateSource(form=CandidateForm.WORKDIR, files=files))
    assert result.status is CompileStatus.COMPILE_ERROR
    return result


def test_contract_breaches_are_refused_before_compiling(build: Build) -> None:
    base = workspace("elementwise").files
    no_binding = {n: t for n, t in base.items() if not n.endswith("_binding.cpp")}
    assert "no kernels/*_binding.cpp" in refused(build, no_binding).message
    escape = {**base, "kernels/silu.cu": '#include "../../etc/passwd"\n' + base["kernels/silu.cu"]}
    assert [d.code for d in refused(build, escape).diagnostics] == ["forbidden_include"]
    fft = {**base, "kernels/fft.cpp": '#include <cufft.h>\n#pragma comment(lib, "nope")\n'}
    assert "not allowed" in refused(build, fft).message
