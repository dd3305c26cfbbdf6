"""The sandbox part: every attack of the catalogue through the real APIs and workers, one runner per channel, one
judge for all.

An attack held when, once its job finished: no secret (canary file, the workers' environment, /etc/shadow)
appears in anything a tenant gets back (job views, compile logs, verdicts, the artifact archive, trajectories);
no ``ESCAPED:`` marker does either; the sink directory stayed empty; the loopback listener saw no connection; the
job finished within its deadline; and the attack did not turn into an infrastructure fault (``sandbox_error`` or
a failed job), which would spare the candidate its penalty.
"""

from __future__ import annotations

import io
import json
import re
import string
import tarfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cuda_agent.contracts.candidate import MODEL_NEW_FILE
from cuda_agent.contracts.common import QueueName
from cuda_agent.selftest import attacks as catalogue
from cuda_agent.selftest.attacks import ATTACKS, Attack
from cuda_agent.selftest.problems import TRANSPOSE_PROBLEM, eval_options, eval_request_options
from cuda_agent.selftest.report import PartReport
from cuda_agent.selftest.stack import Stack

ATTACK_DEADLINE_S = 240.0  # a normal attack's jobs (build, evaluation, rollout) finish well within this
HAZARD_DEADLINE_S = 90.0  # attacks that wedge a worker when the hole is open: how long to wait before calling it
ARTIFACT_READ_LIMIT = 64 * 1024**2
MARKER = re.compile(r"ESCAPED: [^\"\\\n]{0,160}")


@dataclass
class Evidence:
    """What a tenant got back for one attack: (where, text) pairs, and what went wrong on the way."""

    texts: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add_job(self, where: str, job: dict[str, Any]) -> None:
        self.texts.append((where, json.dumps(job)))
        if job["status"] == "failed":
            self.problems.append(f"{where} job failed on the host: {job.get('error')}")
        result = job.get("result") or {}
        if result.get("status") == "sandbox_error":
            self.problems.append(f"{where} became an infrastructure fault (no penalty): {result.get('message')}")


def render(attack: Attack, stack: Stack, template: str, indent: int) -> str:
    ports = [stack.listener.port, stack.redis_port, 5432, *(int(u.rsplit(":", 1)[1]) for u in stack.urls.values())]
    values = {
        "canary": str(stack.canary),
        "canary_dir": str(stack.secret_dir),
        "sink": str(stack.sink),
        "outside": repr([str(p) for p in stack.outside]),
        "ports": repr(ports),
        "ports_shell": " ".join(map(str, ports)),
        "control": control_token(stack),
        "disk_bytes": str(catalogue.DISK_FILL_BYTES),
        "disk_files": str(catalogue.DISK_FILL_FILES),
        "forks": str(catalogue.FORK_BOMB_PROCESSES),
        "memory_bytes": str(catalogue.MEMORY_HOG_BYTES),
    }
    code = string.Template(attack.code).safe_substitute(values)
    prelude = string.Template(catalogue.PRELUDE).safe_substitute(values)
    return string.Template(template).safe_substitute(prelude=prelude, code=textwrap.indent(code, " " * indent))


def control_token(stack: Stack) -> str:
    """Control attacks print this in upper case; the judge looks for the lower case, which only the program's own
    output can hold (the request, echoed back, holds the upper case)."""
    return "SELFTEST-CONTROL-" + stack.canary_token[-8:].upper()


def _submit_and_wait(stack: Stack, service: str, path: str, body: dict[str, Any], deadline: float) -> dict[str, Any]:
    response = stack.post(service, path, body, params={"wait_s": 0} if service != "agent" else None)
    if response.status_code not in (200, 202):
        raise RuntimeError(f"POST {path} answered {response.status_code}: {response.text[:200]}")
    job: dict[str, Any] = stack.wait_job(
        service, response.json()["id"], timeout_s=max(1.0, deadline - time.monotonic())
    )
    return job


def _artifact_texts(stack: Stack, key: str) -> list[tuple[str, str]]:
    """Every regular file of the artifact archive a tenant can download, as text."""
    response = stack.get("compile", f"/v1/artifacts/{key}", timeout_s=120)
    if response.status_code != 200:
        return [("artifact download", response.text)]
    if len(response.content) > ARTIFACT_READ_LIMIT:  # the build's bytes made it into the artifact whole
        return [("artifact download", f"an archive of {len(response.content)} bytes, not searched")]
    texts = []
    try:
        with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as tar:
            for member in tar.getmembers():
                extracted = tar.extractfile(member) if member.isfile() else None
                if extracted is not None:
                    texts.append((f"artifact {member.name}", extracted.read().decode("latin-1")))
    except tarfile.TarError as exc:
        texts.append(("artifact download", f"not a readable archive: {exc}"))
    return texts


def run_build(attack: Attack, stack: Stack, deadline: float) -> Evidence:
    evidence = Evidence()
    if attack.files:
        files = {
            name: string.Template(text).safe_substitute(canary=str(stack.canary)) for name, text in attack.files.items()
        }
        candidate: dict[str, Any] = {"form": "project", "files": {MODEL_NEW_FILE: catalogue.PROJECT_MODEL_NEW, **files}}
    else:
        source = render(attack, stack, catalogue.KERNELBENCH_BUILD, 8)
        candidate = {"form": "kernelbench", "files": {MODEL_NEW_FILE: source}}
    body = {"candidate": candidate, "device": stack.device.value, "timeout_s": 120}
    built = _submit_and_wait(stack, "compile", "/v1/compile", body, deadline)
    evidence.add_job("compile", built)
    key = (built.get("result") or {}).get("artifact_key")
    if key:
        evidence.texts += _artifact_texts(stack, key)
    if key and attack.read_back:
        request = {"problem_source": TRANSPOSE_PROBLEM, "candidate": candidate, "artifact_key": key}
        evidence.add_job(
            "evaluate",
            _submit_and_wait(stack, "eval", "/v1/evaluate", request | eval_request_options(stack.device), deadline),
        )
    return evidence


def run_child(attack: Attack, stack: Stack, deadline: float) -> Evidence:
    evidence = Evidence()
    source = render(attack, stack, catalogue.KERNELBENCH_RUN, 8)
    request = {
        "problem_source": TRANSPOSE_PROBLEM,
        "candidate": {"form": "kernelbench", "files": {MODEL_NEW_FILE: source}},
        **eval_request_options(stack.device),
    }
    evidence.add_job("evaluate", _submit_and_wait(stack, "eval", "/v1/evaluate", request, deadline))
    return evidence


def replay_trajectory(calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """A recorded trajectory for the replay policy: one tool call a turn, then `finish`."""
    turns = []
    for i, (name, args) in enumerate([*calls, ("finish", {"summary": "selftest"})]):
        call = {"id": f"call{i}", "name": name, "arguments": json.dumps(args)}
        turns.append({"index": i, "assistant": {"content": None, "tool_calls": [call]}})
    return {"id": "selftest", "policy": "replay", "config": {}, "prompt": [], "turns": turns}


def optimize_body(stack: Stack, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    config = {**eval_options(stack.device), "form": "project", "max_turns": len(calls) + 1, "bash_timeout_s": 30}
    return {
        "problem_source": TRANSPOSE_PROBLEM,
        "policy": "replay",
        "policy_options": {"trajectory": replay_trajectory(calls)},
        "config": config,
    }


def run_agent(attack: Attack, stack: Stack, deadline: float) -> Evidence:
    evidence = Evidence()
    values = {"canary": str(stack.canary), "canary_dir": str(stack.secret_dir), "sink": str(stack.sink)}
    values["control"] = control_token(stack)
    values["ports_shell"] = " ".join(
        map(
            str, [stack.listener.port, stack.redis_port, 5432, *(int(u.rsplit(":", 1)[1]) for u in stack.urls.values())]
        )
    )
    calls = [
        (name, json.loads(string.Template(json.dumps(args)).safe_substitute(values))) for name, args in attack.tools
    ]
    while True:  # the per-tenant limit on concurrent rollouts: wait for a slot, as a client would
        response = stack.post("agent", "/v1/optimize", optimize_body(stack, calls))
        if response.status_code != 429 or time.monotonic() > deadline:
            break
        time.sleep(1)
    if response.status_code not in (200, 202):
        raise RuntimeError(f"POST /v1/optimize answered {response.status_code}: {response.text[:200]}")
    job = stack.wait_job("agent", response.json()["id"], timeout_s=max(1.0, deadline - time.monotonic()))
    evidence.add_job("optimize", job)
    trajectory_id = (job.get("result") or {}).get("trajectory_id")
    if trajectory_id:
        evidence.texts.append(("trajectory", stack.get("agent", f"/v1/trajectories/{trajectory_id}").text))
    return evidence


RUNNERS = {"build": run_build, "run": run_child, "agent": run_agent}


def judge(attack: Attack, stack: Stack, evidence: Evidence, connections_before: int) -> str:
    """'' when the attack held, else the first reason it did not."""
    reasons = list(evidence.problems)
    for where, text in evidence.texts:
        if leaked := stack.leaked(text):
            reasons.insert(0, f"{', '.join(leaked)} leaked into the {where}")
        if attack.name.endswith("_control"):
            continue
        if found := MARKER.search(text):
            reasons.insert(0, f"{found.group(0)} (in the {where})")
    if attack.name.endswith("_control"):
        token = control_token(stack).lower()
        if not any(token in text for _, text in evidence.texts):
            reasons.append("the channel's output never reached the tenant: markers of its attacks are unobservable")
    if written := stack.host_writes():
        reasons.insert(0, f"created on the host: {', '.join(written)}")
    if stack.listener.connections > connections_before:
        reasons.insert(0, "a sandboxed process connected to the suite's loopback listener")
    return reasons[0] if reasons else ""


def attempt(attack: Attack, stack: Stack, deadline_s: float) -> str:
    connections = stack.listener.connections
    try:
        evidence = RUNNERS[attack.channel](attack, stack, time.monotonic() + deadline_s)
    except TimeoutError as exc:
        return f"no verdict within {deadline_s:.0f} s (the host is stuck or the job was lost): {exc}"
    except Exception as exc:  # the API refused or crashed: the attack still did not get a clean verdict
        return f"{type(exc).__name__}: {exc}"
    return judge(attack, stack, evidence, connections)


def run_sandbox_part(stack: Stack, report: PartReport, only: set[str] | None = None, parallel: int = 3) -> None:
    """Run the catalogue: ordinary attacks first (``parallel`` at a time), then the hazardous ones together,
    after which every worker is replaced so that a wedged one does not slow the parts that follow."""
    chosen = [a for a in ATTACKS if only is None or a.name in only]
    ordinary = [a for a in chosen if not a.hazardous]
    hazardous = [a for a in chosen if a.hazardous]
    with stack.responsiveness() as latencies:
        with ThreadPoolExecutor(parallel) as pool:
            results = pool.map(lambda a: attempt(a, stack, ATTACK_DEADLINE_S), ordinary)
            for attack, reason in zip(ordinary, results, strict=True):
                report.add(attack.name, not reason, reason)
        if hazardous:
            with ThreadPoolExecutor(len(hazardous)) as pool:
                results = pool.map(lambda a: attempt(a, stack, HAZARD_DEADLINE_S), hazardous)
                for attack, reason in zip(hazardous, results, strict=True):
                    report.add(attack.name, not reason, reason)
            stack.cancel_unfinished()
            for queue in (QueueName.COMPILE, QueueName.EVAL, QueueName.ROLLOUT):
                stack.restart_worker(queue)
    slowest = max(latencies, default=0.0)
    report.notes["slowest /healthz"] = f"{slowest:.1f} s"
    report.add(
        "host_responsive",
        slowest < 5.0,
        f"the API answered /healthz after {slowest:.1f} s while attacks ran"
        if slowest != float("inf")
        else "the API stopped answering /healthz while attacks ran",
    )
