"""Fixtures of the workdir-form tests: the workspaces written for them (workspaces/<name>/: model.py, model_new.py,
kernels/), and one build of each workspace per session (the build cache is tests/conftest.py's `shared_cache`).

A workdir build compiles against torch's headers: the precompiled header alone takes about a minute of CPU, and
each workspace's objects tens of seconds. The tests of this folder share one data dir (so one header, and each
object once) and one build of each workspace."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cuda_agent.contracts.candidate import CandidateForm, CandidateSource, read_candidate_dir
from cuda_agent.contracts.compile import CompileRequest, CompileResult

WORKSPACES = Path(__file__).parent / "workspaces"
NAMES = ("elementwise", "reduction", "gemm_cublas", "conv_cudnn")


def workspace(name: str) -> CandidateSource:
    return read_candidate_dir(WORKSPACES / name, CandidateForm.WORKDIR)


def problem(name: str) -> str:
    return (WORKSPACES / name / "model.py").read_text()


@pytest.fixture(scope="session")
def _builds() -> dict[str, CompileResult]:
    return {}


@pytest.fixture
def build(shared_cache: Path, _builds: dict[str, CompileResult]) -> Callable[[CandidateSource], CompileResult]:
    """Compile a candidate once per session (keyed by content); later calls return the first result."""
    from cuda_agent.compile import compile_candidate

    def run(candidate: CandidateSource) -> CompileResult:
        if candidate.key not in _builds:
            _builds[candidate.key] = compile_candidate(CompileRequest(candidate=candidate))
        return _builds[candidate.key]

    return run
