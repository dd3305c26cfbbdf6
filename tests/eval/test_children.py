"""Warm evaluation children: started ahead of work, one job each, replaced when taken, cold when a warm one died."""

from __future__ import annotations

import json

import pytest

from cuda_agent.eval.children import ChildKey, WarmChildren, run_job, start_warm
from cuda_agent.eval.protocol import PROBLEM_FILE, RESULT_FILE, ChildJob
from cuda_agent.sandbox import SandboxProcess
from tests.eval.helpers import TRANSPOSE

pytestmark = pytest.mark.sandbox

KEY = ChildKey(device="cpu", gpu_index=None, cpu_time_s=300, omp_threads="1")


def reference_job() -> str:
    return ChildJob(role="reference", device="cpu", seeds=[1, 2]).model_dump_json()


def test_each_taken_child_is_new_and_runs_exactly_one_job() -> None:
    pool = WarmChildren()
    try:
        pool.refill(KEY, 2)
        first, second = pool.take(KEY), pool.take(KEY)
        third = pool.take(KEY)  # nothing idle left: started on demand, still warm
        slots = [first, second, third]
        assert len({s.root for s in slots}) == 3 and all(s.alive and s.warm for s in slots)
        (first.workdir / PROBLEM_FILE).write_text(TRANSPOSE)
        outcome = run_job(first, reference_job(), 120)
        assert outcome.exit_code == 0, outcome.stderr[-500:]
        report = json.loads((first.workdir / RESULT_FILE).read_text())
        assert report["status"] == "ok" and report["phases"]["go"] >= report["phases"]["ready"]
        assert not first.alive  # one job, then the process is gone
    finally:
        pool.close()
        for slot in slots:
            slot.discard()


def test_a_warm_child_that_died_is_replaced_by_a_cold_one() -> None:
    slot = start_warm(KEY)
    try:
        assert isinstance(slot.process, SandboxProcess)
        slot.process.kill()
        slot.process.wait(10)
        (slot.workdir / PROBLEM_FILE).write_text(TRANSPOSE)
        outcome = run_job(slot, reference_job(), 120)
        assert outcome.exit_code == 0, outcome.stderr[-500:]
        assert not slot.warm
        assert json.loads((slot.workdir / RESULT_FILE).read_text())["status"] == "ok"
    finally:
        slot.discard()


def test_other_configuration_replaces_idle_children() -> None:
    pool = WarmChildren()
    try:
        pool.refill(KEY, 1)
        stale = pool._idle[0]
        other = ChildKey(device="cpu", gpu_index=None, cpu_time_s=301, omp_threads="1")
        pool.refill(other, 1)
        assert not stale.alive and not stale.root.exists()
        assert pool._idle and pool._idle[0].key == other
    finally:
        pool.close()
