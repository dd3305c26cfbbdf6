"""The faults part: kill things mid-job and check that nothing is lost and nothing is stored twice.

Each fault starts jobs, waits until they run, injects the fault, and requires every job to reach ``succeeded``
within ``FAULT_DEADLINE_S`` (the stack runs with short lease and sweep timings, see Stack.child_env), with one job
row per idempotency key and at most one result row per job. Recovery is left to the workers themselves (their
lease sweep, Celery's redelivery): the suite never calls a recovery function, so a sweeper that does not run fails.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cuda_agent.contracts.candidate import MODEL_NEW_FILE
from cuda_agent.contracts.common import Device, QueueName
from cuda_agent.selftest.problems import evaluation_request, fresh_candidate, slow_candidate
from cuda_agent.selftest.report import PartReport
from cuda_agent.selftest.stack import Stack, StackError

FAULT_DEADLINE_S = 90.0
RUNNING_TIMEOUT_S = 120.0  # a job waits behind earlier work before it starts
PROBE_SLEEP_S = 20.0  # long enough to be seen running and killed mid-task on a loaded host

# A CUDA candidate whose kernel writes far outside its buffer: a sticky CUDA error that kills its process.
ILLEGAL_ACCESS_KERNEL = """
#include <cuda_runtime.h>
__global__ void oob(float* out) { out[threadIdx.x + (1LL << 40)] = 1.0f; }
extern "C" void transpose(const float* x, float* out, long long rows, long long cols, cudaStream_t stream) {
    oob<<<1, 32, 0, stream>>>(out);
}
"""


def _submit_probe(stack: Stack, queue: QueueName, sleep_s: float = PROBE_SLEEP_S) -> str:
    body = {"queue": queue.value, "echo": "fault", "sleep_s": sleep_s}
    response = stack.post("agent", "/v1/probe", body, headers={"Idempotency-Key": f"fault-{uuid.uuid4().hex}"})
    response.raise_for_status()
    return str(response.json()["id"])


def _wait_status(stack: Stack, job_id: str, statuses: set[str], timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = stack.get("agent", f"/v1/jobs/{job_id}").json()
        if job["status"] in statuses:
            return job
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {job['status']} after {timeout_s:.0f} s")
        time.sleep(0.2)


def _finished_ok(
    stack: Stack, job_id: str, deadline: float, check: Callable[[dict[str, Any]], str] | None = None
) -> str:
    """'' when the job succeeded before the deadline (and ``check`` of its view says ''), else why not."""
    try:
        job = stack.wait_job("agent", job_id, timeout_s=max(1.0, deadline - time.monotonic()))
    except TimeoutError as exc:
        return f"lost: {exc}"
    if job["status"] != "succeeded":
        return f"job {job_id} {job['status']}: {job.get('error')}"
    return check(job) if check else ""


def _inject_when_running(stack: Stack, job_id: str, inject: Callable[[], object]) -> str:
    """Wait until the job runs, then inject the fault: '' or why it could not be injected mid-job."""
    job = _wait_status(stack, job_id, {"running", "succeeded", "failed", "cancelled"}, RUNNING_TIMEOUT_S)
    if job["status"] != "running":
        return f"job {job_id} was {job['status']} before the fault could be injected"
    inject()
    return ""


def _per_queue(stack: Stack, report: PartReport, name: str, inject: Callable[[QueueName], object]) -> None:
    """A probe on every queue at once; each gets the fault as soon as it runs; all must still succeed."""
    jobs = {queue: _submit_probe(stack, queue) for queue in QueueName}
    with ThreadPoolExecutor(len(jobs)) as pool:
        injected = dict(
            zip(jobs, pool.map(lambda q: _inject_when_running(stack, jobs[q], lambda: inject(q)), jobs), strict=True)
        )
    deadline = time.monotonic() + FAULT_DEADLINE_S
    for queue, job_id in jobs.items():
        reason = injected[queue] or _finished_ok(stack, job_id, deadline)
        report.add(f"{name}_{queue.value}", not reason, reason)


def _kill_pool_children(stack: Stack, queue: QueueName) -> int:
    pids = stack.workers[queue].children()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return len(pids)


def _replace_worker(stack: Stack, queue: QueueName) -> None:
    stack.workers[queue].kill()
    stack.start_worker(queue)


def pool_child_kills(stack: Stack, report: PartReport) -> None:
    """Every queue: a probe runs, its worker's pool child is SIGKILLed (as the OOM killer would)."""
    _per_queue(stack, report, "pool_child_kill", lambda queue: _kill_pool_children(stack, queue))


def main_process_kills(stack: Stack, report: PartReport) -> None:
    """Every queue: a probe runs, its worker's whole process group is SIGKILLed, a new worker starts."""
    _per_queue(stack, report, "main_process_kill", lambda queue: _replace_worker(stack, queue))


def redis_restart(stack: Stack, report: PartReport) -> None:
    """A running job and one queued behind it (its message only in Redis) when Redis restarts without its data."""
    running = _submit_probe(stack, QueueName.DATASET)
    _wait_status(stack, running, {"running"}, RUNNING_TIMEOUT_S)
    queued = _submit_probe(stack, QueueName.DATASET, sleep_s=0)
    stack.restart_redis()
    deadline = time.monotonic() + FAULT_DEADLINE_S
    for name, job_id in (("redis_restart_running_job", running), ("redis_restart_queued_job", queued)):
        reason = _finished_ok(stack, job_id, deadline)
        report.add(name, not reason, reason)


def _evaluate(stack: Stack, candidate: dict[str, Any], artifact_key: str | None = None) -> str:
    body = evaluation_request(stack.device, candidate)
    if artifact_key:
        body["artifact_key"] = artifact_key
    response = stack.post("eval", "/v1/evaluate", body, params={"wait_s": 0})
    response.raise_for_status()
    return str(response.json()["id"])


def _built(job: dict[str, Any]) -> str:
    status = (job.get("result") or {}).get("status")
    return "" if status == "ok" else f"build {status}: {(job.get('result') or {}).get('message')}"


def _verdict_is(status: str) -> Callable[[dict[str, Any]], str]:
    def check(job: dict[str, Any]) -> str:
        got = (job.get("result") or {}).get("status")
        return "" if got == status else f"verdict {got}, expected {status}: {(job.get('result') or {}).get('message')}"

    return check


def postgres_connections_killed(stack: Stack, report: PartReport) -> None:
    """Every server connection of the stack's database is terminated while a probe and an evaluation run."""
    probe = _submit_probe(stack, QueueName.DATASET)
    evaluation = _evaluate(stack, fresh_candidate())
    _wait_status(stack, probe, {"running"}, RUNNING_TIMEOUT_S)
    _wait_status(stack, evaluation, {"running"}, RUNNING_TIMEOUT_S)
    stack.terminate_db_connections()
    deadline = time.monotonic() + FAULT_DEADLINE_S
    reason = _finished_ok(stack, probe, deadline)
    report.add("postgres_kill_probe", not reason, reason)
    reason = _finished_ok(stack, evaluation, deadline, _verdict_is("correct"))
    report.add("postgres_kill_evaluation", not reason, reason)


def real_jobs_under_pool_kills(stack: Stack, report: PartReport) -> None:
    """A build and an evaluation whose pool child is killed mid-job: each finishes with the right outcome, once."""
    slow = slow_candidate(PROBE_SLEEP_S)
    response = stack.post(
        "compile", "/v1/compile", {"candidate": slow, "device": stack.device.value}, params={"wait_s": 0}
    )
    response.raise_for_status()
    build = str(response.json()["id"])
    evaluation = _evaluate(stack, slow_candidate(PROBE_SLEEP_S))
    with ThreadPoolExecutor(2) as pool:
        injected = list(
            pool.map(
                lambda job_queue: _inject_when_running(
                    stack, job_queue[0], lambda: _kill_pool_children(stack, job_queue[1])
                ),
                [(build, QueueName.COMPILE), (evaluation, QueueName.EVAL)],
            )
        )
    deadline = time.monotonic() + FAULT_DEADLINE_S
    reason = injected[0] or _finished_ok(stack, build, deadline, _built)
    report.add("pool_child_kill_mid_build", not reason, reason)
    reason = injected[1] or _finished_ok(stack, evaluation, deadline, _verdict_is("correct"))
    report.add("pool_child_kill_mid_evaluation", not reason, reason)


def api_restart_while_polling(stack: Stack, report: PartReport) -> None:
    """A client polls a running job while the API it polls is killed and started again."""
    job_id = _submit_probe(stack, QueueName.ROLLOUT)
    outcome: list[str] = []
    poller = threading.Thread(target=lambda: outcome.append(_finished_ok(stack, job_id, time.monotonic() + 120)))
    poller.start()
    _wait_status(stack, job_id, {"running"}, RUNNING_TIMEOUT_S)
    stack.restart_api("agent")
    poller.join()
    reason = outcome[0] if outcome else "the polling client crashed"
    report.add("api_restart_while_polling", not reason, reason)


def no_duplicates(stack: Stack, report: PartReport) -> None:
    """At most one result row per job and one job per idempotency key, over everything the stack stored."""
    from sqlalchemy import func, select

    from cuda_agent.db import session_scope
    from cuda_agent.db.models import CompileResultRow, EvalResultRow, Trajectory

    problems = []
    with session_scope() as session:
        for table in (CompileResultRow, EvalResultRow, Trajectory):
            query = (
                select(table.job_id, func.count())
                .where(table.job_id.is_not(None))
                .group_by(table.job_id)
                .having(func.count() > 1)
            )
            problems += [f"{count} {table.__tablename__} rows for job {job}" for job, count in session.execute(query)]
    report.add("no_duplicate_results", not problems, "; ".join(problems[:3]))


def illegal_access_contained(stack: Stack, report: PartReport) -> None:
    """CUDA only: an illegal memory access is reported as such, and the next verdict on the worker is right."""
    from cuda_agent.selftest.attacks import PROJECT_MODEL_NEW

    candidate = {
        "form": "project",
        "files": {MODEL_NEW_FILE: PROJECT_MODEL_NEW, "kernels/oob.cu": ILLEGAL_ACCESS_KERNEL},
    }
    response = stack.post("compile", "/v1/compile", {"candidate": candidate, "device": "cuda"}, params={"wait_s": 120})
    built = stack.wait_job("compile", response.json()["id"], timeout_s=300)
    key = (built.get("result") or {}).get("artifact_key")
    if not key:
        report.add("illegal_access_contained", False, f"the candidate did not build: {built.get('result')}")
        return
    deadline = time.monotonic() + 300
    reason = _finished_ok(stack, _evaluate(stack, candidate, key), deadline, _verdict_is("illegal_access"))
    report.add("illegal_access_reported", not reason, reason)
    reason = _finished_ok(stack, _evaluate(stack, fresh_candidate()), deadline, _verdict_is("correct"))
    report.add("verdict_after_illegal_access", not reason, reason)


FAULTS: tuple[Callable[[Stack, PartReport], None], ...] = (
    pool_child_kills,
    main_process_kills,
    real_jobs_under_pool_kills,
    redis_restart,
    postgres_connections_killed,
    api_restart_while_polling,
)


def run_faults_part(stack: Stack, report: PartReport) -> None:
    faults = [*FAULTS, *((illegal_access_contained,) if stack.device is Device.CUDA else ())]
    for fault in faults:
        try:
            fault(stack, report)
        except Exception as exc:  # a fault that could not even be set up is a failure of that fault
            report.add(fault.__name__, False, f"{type(exc).__name__}: {exc}")
        ready(stack)
    no_duplicates(stack, report)


def ready(stack: Stack) -> None:
    """The next fault starts from a stack whose every worker answers: dead or deaf workers are replaced."""
    for queue in QueueName:
        try:
            if not stack.workers[queue].alive():
                stack.start_worker(queue)
            stack.wait_workers([queue])
        except StackError:
            stack.restart_worker(queue)
