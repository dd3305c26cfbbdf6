"""Typed jobs: the runner validates a request once, when an attempt loads it; handlers take the kind's request
model and return its result model; what reaches the caller is that model."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from cuda_agent.contracts.common import JobKind, JobStatus
from cuda_agent.contracts.compile import CompileRequest
from cuda_agent.contracts.jobs import ProbeRequest, ProbeResult
from cuda_agent.jobs import JOB_SPECS, JobContext, cancel_job, create_job, get_job, run_job, run_to_result, submit_job
from cuda_agent.jobs.registry import PROBE_JOB

HANDLED: list[ProbeRequest] = []


def record_request(request: ProbeRequest, context: JobContext) -> ProbeResult:
    HANDLED.append(request)
    return ProbeResult(echo=request.echo, host="h", pid=1, python="3", attempt=context.attempt)


def return_a_dict(_request: ProbeRequest, _context: JobContext) -> dict[str, str]:
    return {"echo": "not a model"}


def test_the_handler_gets_the_request_model_and_the_caller_the_result_model(
    embedded_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    HANDLED.clear()
    monkeypatch.setitem(JOB_SPECS, JobKind.PROBE, replace(PROBE_JOB, handler=f"{__name__}:record_request"))
    result = run_to_result(PROBE_JOB, ProbeRequest(echo="hi", sleep_s=0.0))
    assert isinstance(result, ProbeResult) and (result.echo, result.attempt) == ("hi", 1)
    assert [ProbeRequest(echo="hi", sleep_s=0.0)] == HANDLED


def test_a_stored_request_that_does_not_fit_its_model_fails_its_job_unrun(
    embedded_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    HANDLED.clear()
    monkeypatch.setitem(JOB_SPECS, JobKind.PROBE, replace(PROBE_JOB, handler=f"{__name__}:record_request"))
    job = submit_job(JobKind.PROBE, {"sleep_s": "not a number", "echo": "x" * 1000})
    assert job.status is JobStatus.FAILED and job.result is None and HANDLED == []
    assert job.error is not None and job.error.startswith("invalid ProbeRequest: ") and "\n" not in job.error
    assert "sleep_s: Input should be a valid number" in job.error and "echo: String should have at most" in job.error


def test_a_request_model_of_another_kind_is_refused_at_submission(embedded_db: None) -> None:
    with pytest.raises(TypeError, match="a probe job takes a ProbeRequest, not a CompileRequest"):
        create_job(
            JobKind.PROBE,
            CompileRequest.model_validate({"candidate": {"form": "kernelbench", "files": {"model_new.py": "x = 1\n"}}}),
        )


def test_a_handler_returning_something_else_than_its_result_model_fails_the_job(
    embedded_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(JOB_SPECS, JobKind.PROBE, replace(PROBE_JOB, handler=f"{__name__}:return_a_dict"))
    job = submit_job(JobKind.PROBE, ProbeRequest())
    assert job.status is JobStatus.FAILED and job.result is None
    assert job.error == f"TypeError: {__name__}:return_a_dict returned dict, not ProbeResult"


def test_a_probe_cancelled_while_running_ends_cancelled_with_its_result(embedded_db: None) -> None:
    job, _ = create_job(JobKind.PROBE, ProbeRequest(echo="stop", sleep_s=30.0))
    attempt = threading.Thread(target=run_job, args=(job.id,))
    attempt.start()
    while get_job(job.id).status is JobStatus.QUEUED:
        time.sleep(0.02)
    cancel_job(job.id)
    attempt.join(timeout=10)
    after = get_job(job.id)
    assert after.status is JobStatus.CANCELLED and after.result is not None
    assert ProbeResult.model_validate(after.result).cancelled and after.result["echo"] == "stop"


def test_terminal_statuses() -> None:
    assert {s for s in JobStatus if s.terminal} == {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
