"""Size-bounded LRU eviction of the compile caches: real files in a temporary data dir."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from cuda_agent import safefs
from cuda_agent.compile import compile_candidate, evict, store
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.contracts.common import CompileStatus, Device
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.settings import get_settings


def key_of(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def aged(path: Path, age_s: int) -> Path:
    """Last used ``age_s`` seconds before the others (all at a fixed past time, so ``mark_used`` is newer)."""
    t = (1_000_000 - age_s) * 10**9
    os.utime(path, ns=(t, t), follow_symlinks=False)
    return path


def artifact(name: str, size: int, age_s: int) -> Path:
    """A published artifact of ``size`` bytes of payload, through the store's own staging and publish."""
    key = key_of(name)
    staging = store.new_staging()
    (staging / "extension").mkdir()
    (staging / "extension" / "cuda_extension.so").write_bytes(b"x" * size)
    result = CompileResult(status=CompileStatus.OK, cache_key=key, artifact_key=key)
    path = store.publish(
        key, staging, store.BuildRecord(form=CandidateForm.WORKDIR, device=Device.CUDA, arch=None, result=result)
    )
    return aged(path, age_s)


def cache_file(root: Path, name: str, size: int, age_s: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(b"o" * size)
    return aged(root / name, age_s)


def total(roots: list[Path]) -> int:
    return sum(f.stat().st_size for r in roots for f in r.rglob("*") if f.is_file() and not f.is_symlink())


@pytest.fixture
def roots() -> list[Path]:
    cache = get_settings().data_dir / "compile_cache"
    return [store.artifacts_root(), cache / "objects", cache / "pch"]


def test_least_recently_used_goes_first_and_use_refreshes(roots: list[Path]) -> None:
    old = artifact("old", 1000, age_s=30)
    middle = artifact("middle", 1000, age_s=20)
    new = artifact("new", 1000, age_s=10)
    store.read_record(old.name)  # a cache hit: now the most recently used
    removed = evict.evict(roots, max_bytes=total(roots) - 500)
    assert removed == [middle]
    assert store.has_artifact(old.name) and store.has_artifact(new.name) and not store.has_artifact(middle.name)


def test_budget_holds_across_artifacts_objects_and_headers(roots: list[Path]) -> None:
    _, objects, pch = roots
    entries = [
        artifact("a", 4000, age_s=60),
        cache_file(objects, "k1.log", 10, age_s=50),  # same age as its object: the smaller goes first
        cache_file(objects, "k1.o", 3000, age_s=50),
        aged(cache_file(pch / "p1", "h.gch", 5000, age_s=0).parent, age_s=40),
        artifact("b", 2000, age_s=30),
        cache_file(objects, "k2.o", 3000, age_s=20),
        aged(cache_file(pch / "p2", "h.gch", 5000, age_s=0).parent, age_s=10),
    ]
    budget = total(roots) // 2
    removed = evict.evict(roots, max_bytes=budget)
    assert 0 < total(roots) <= budget
    assert removed == entries[: len(removed)]  # the oldest, in order; everything newer is still there
    assert all(p.exists() for p in entries[len(removed) :]) and not any(p.exists() for p in removed)


def test_staging_in_use_and_in_flight_writes_survive(roots: list[Path]) -> None:
    _, objects, _ = roots
    in_flight = store.new_staging()
    (in_flight / "big.so").write_bytes(b"s" * 10_000)
    aged(in_flight, 100)
    in_use = artifact("in use", 1000, age_s=100)
    other = artifact("other", 1000, age_s=1)
    tmp_write = cache_file(objects, ".k3.o.abc.tmp", 1000, age_s=100)  # safefs.write_bytes before its rename
    assert evict.evict(roots, max_bytes=1, keep={in_use}) == [other]
    assert (in_flight / "big.so").stat().st_size == 10_000 and tmp_write.exists()
    assert store.has_artifact(in_use.name)


def test_planted_links_are_removed_never_followed(roots: list[Path], tmp_path: Path) -> None:
    artifacts, objects, _ = roots
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    victim = artifact("victim", 100, age_s=5)
    (victim / "extension" / "link").symlink_to(outside)
    planted = artifacts / key_of("planted")
    planted.symlink_to(outside, target_is_directory=True)
    objects.mkdir(parents=True)
    (objects / "k.o").symlink_to(outside / "precious")
    evict.evict(roots, max_bytes=0)
    assert not victim.exists() and not planted.is_symlink() and not (objects / "k.o").is_symlink()
    assert (outside / "precious").read_text() == "keep me"


def test_a_reader_sees_the_whole_artifact_or_none(roots: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    path = artifact("read", 1000, age_s=5)
    key = path.name
    seen_while_deleting = []
    remove_tree = safefs.remove_tree

    def watched(target: Path) -> None:
        seen_while_deleting.append(store.has_artifact(key))
        remove_tree(target)
        seen_while_deleting.append(store.has_artifact(key))

    monkeypatch.setattr(safefs, "remove_tree", watched)
    assert store.has_artifact(key)
    assert evict.evict(roots, max_bytes=0) == [path]
    assert seen_while_deleting == [False, False]
    assert not store.has_artifact(key) and os.listdir(store.artifacts_root()) == [".staging"]  # no trash left


def test_trash_of_an_interrupted_eviction_is_cleared(roots: list[Path]) -> None:
    trash = store.artifacts_root() / f"{evict.TRASH_PREFIX}dead"
    (trash / "extension").mkdir(parents=True)
    evict.evict(roots, max_bytes=10**9)
    assert not trash.exists()


def test_fetched_artifacts_are_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    fetched = artifact("fetched", 5000, age_s=0)
    packed = store.pack_artifact(fetched.name)
    safefs.remove_tree(fetched)
    old = artifact("old", 5000, age_s=10)
    monkeypatch.setenv("CUDA_AGENT_COMPILE_CACHE_MAX_BYTES", "8000")
    get_settings.cache_clear()
    store.unpack_artifact(fetched.name, packed)
    assert store.has_artifact(fetched.name) and not store.has_artifact(old.name)


SCALE_CPP = """#include <cstdint>

extern "C" void scale_add(const float* x, float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + %s;
}
"""


def cpu_project(constant: str) -> CompileRequest:
    files = {"model_new.py": "from cuda_agent.kernels import load_kernels\n", "kernels/s.cpp": SCALE_CPP % constant}
    return CompileRequest(candidate=CandidateSource(form=CandidateForm.PROJECT, files=files), device=Device.CPU)


@pytest.mark.sandbox
def test_builds_keep_the_caches_within_the_setting(roots: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    first = compile_candidate(cpu_project("1.0f"))
    second = compile_candidate(cpu_project("2.0f"))
    assert first.status is second.status is CompileStatus.OK, (first.log, second.log)
    one_build = total(roots) // 2
    for root in roots[:2]:  # both builds long ago (the clock behind mtimes may tick only every few milliseconds)
        for entry in root.iterdir():
            aged(entry, 100)
    assert compile_candidate(cpu_project("1.0f")).cache_hit  # the first is now the most recently used
    monkeypatch.setenv("CUDA_AGENT_COMPILE_CACHE_MAX_BYTES", str(2 * one_build + one_build // 2))
    get_settings.cache_clear()
    third = compile_candidate(cpu_project("3.0f"))
    assert third.status is CompileStatus.OK, third.log
    assert total(roots) <= get_settings().compile_cache_max_bytes
    assert store.has_artifact(first.cache_key) and store.has_artifact(third.cache_key)
    assert not store.has_artifact(second.cache_key)
