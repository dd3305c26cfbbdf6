"""Warm evaluation children: started ahead of work, one job each over their channel, replaced when taken, cold
when a warm one died."""

from __future__ import annotations

import pytest

from cuda_agent.contracts.candidate import PROBLEM_FILE, CandidateForm, CandidateSource
from cuda_agent.contracts.common import Device
from cuda_agent.contracts.eval import EvalRequest
from cuda_agent.eval.child.protocol import Ready
from cuda_agent.eval.children import ChildKey, ChildSlot, WarmChildren, start_warm
from cuda_agent.eval.evaluate import Evaluation, Session
from cuda_agent.sandbox import SandboxProcess
from cuda_agent.settings import get_settings
from tests.eval.helpers import TRANSPOSE, TRANSPOSE_NEW

pytestmark = pytest.mark.sandbox

KEY = ChildKey(device="cpu", gpu_index=None, cpu_time_s=300, omp_threads="1")


def reference_session(slot: ChildSlot) -> tuple[Evaluation, Session]:
    source = CandidateSource(form=CandidateForm.KERNELBENCH, files={"model_new.py": TRANSPOSE_NEW})
    evaluation = Evaluation(EvalRequest(problem_source=TRANSPOSE, candidate=source, device=Device.CPU), get_settings())
    return evaluation, Session(evaluation, slot, "reference")


def run_reference_job(slot: ChildSlot) -> None:
    """The job over the channel, the memory plan back, then the final report echoing the finish nonce."""
    (slot.workdir / PROBLEM_FILE).write_text(TRANSPOSE)
    evaluation, session = reference_session(slot)
    session.begin(evaluation.job("reference"))
    ready, _ = session.expect(Ready, 120)
    assert ready.plan is not None and ready.plan.output_bytes == 128 * 256 * 4
    report = session.finish(60)
    assert report.status == "ok" and report.phases["go"] >= report.phases["ready"]


def test_each_taken_child_is_new_and_runs_exactly_one_job() -> None:
    pool = WarmChildren()
    slots: list[ChildSlot] = []
    try:
        pool.refill(KEY, 2)
        slots = [pool.take(KEY), pool.take(KEY), pool.take(KEY)]  # the third: nothing idle left, started warm
        assert len({s.root for s in slots}) == 3 and all(s.alive and s.warm for s in slots)
        run_reference_job(slots[0])
        assert not slots[0].alive  # one job, then the process is gone
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
        run_reference_job(slot)
        assert not slot.warm
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
