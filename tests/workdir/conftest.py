"""Fixtures of the workdir-form tests: the workspaces written for them (workspaces/<name>/: model.py, model_new.py,
kernels/), and one build cache for the whole session.

A workdir build compiles against torch's headers: the precompiled header alone takes about a minute of CPU, and
each workspace's objects tens of seconds. The tests of this folder share one data dir (so one header, and each
object once) and one build of each workspace."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
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
def workdir_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("workdir_data")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def shared_cache(isolated_settings: None, workdir_data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test uses the session's data dir (build cache and artifacts) instead of its own."""
    from cuda_agent.settings import get_settings

    monkeypatch.setenv("CUDA_AGENT_DATA_DIR", str(workdir_data_dir))
    get_settings.cache_clear()
    return workdir_data_dir


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
