"""The read routes the dashboard lists and plots from: jobs, problems, verified candidates. Each answers its own
tenant only, as the single-object routes do (the tenancy selftest checks those across the running stack)."""

from __future__ import annotations

from cuda_agent.candidates import record_problem
from cuda_agent.contracts.candidate import CandidateSource
from cuda_agent.contracts.common import EvalStatus, JobKind, JobStatus
from cuda_agent.contracts.eval import EvalRequest, EvalResult
from cuda_agent.db import session_scope
from cuda_agent.db.models import Job
from cuda_agent.eval.jobs import store_eval_result
from cuda_agent.jobs import create_job
from cuda_agent.jobs.runner import finish
from tests.api.conftest import Clients, Tenants

PROBLEM = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"


def candidate(marker: str) -> CandidateSource:
    return CandidateSource.model_validate(
        {"form": "kernelbench", "files": {"model_new.py": f"# {marker}\nclass ModelNew: pass\n"}}
    )


def verify_stored(tenant: str, source: CandidateSource, speedup: float, correct: bool = True) -> str:
    """An evaluate job of ``tenant`` with its result row, stored the way the eval worker stores it."""
    request = EvalRequest(problem_source=PROBLEM, candidate=source, device="cpu")
    job, _ = create_job(JobKind.EVALUATE, request, tenant=tenant)
    result = EvalResult(
        status=EvalStatus.CORRECT if correct else EvalStatus.INCORRECT,
        correct=correct,
        reward=2.0 if correct else -1.0,
        speedup_vs_eager=speedup,
    )
    with session_scope() as session:
        row = session.get(Job, job.id)
        store_eval_result(session, row, request, result)
        finish(row, JobStatus.SUCCEEDED)
    return job.id


def test_jobs_list_is_the_tenants_own_newest_first_and_filtered(tenants: Tenants, clients: Clients) -> None:
    first = verify_stored("tenant-a", candidate("one"), 1.0)
    probe, _ = create_job(JobKind.PROBE, {"queue": "compile"}, tenant="tenant-a")
    theirs, _ = create_job(JobKind.PROBE, {"queue": "compile"}, tenant="tenant-b")
    agent = clients["agent"]

    mine = agent.get("/v1/jobs", headers=tenants.header(tenants.a)).json()
    assert [j["id"] for j in mine] == [probe.id, first]
    assert [j["id"] for j in agent.get("/v1/jobs", headers=tenants.header(tenants.b)).json()] == [theirs.id]
    by_kind = agent.get("/v1/jobs", params={"kind": "evaluate"}, headers=tenants.header(tenants.a)).json()
    assert [j["id"] for j in by_kind] == [first]
    done = agent.get("/v1/jobs", params={"status": "succeeded"}, headers=tenants.header(tenants.a)).json()
    assert [j["id"] for j in done] == [first]
    paged = agent.get("/v1/jobs", params={"offset": 1, "limit": 1}, headers=tenants.header(tenants.a)).json()
    assert [j["id"] for j in paged] == [first]
    bad = agent.get("/v1/jobs", params={"status": "sleeping"}, headers=tenants.header(tenants.a))
    assert bad.status_code == 422 and "status" in bad.text


def test_problem_pages_show_only_the_tenants_verifications(tenants: Tenants, clients: Clients) -> None:
    slow, fast = candidate("slow"), candidate("fast")
    verify_stored("tenant-a", slow, 1.2)
    verify_stored("tenant-a", fast, 2.5)
    verify_stored("tenant-a", candidate("wrong"), 9.0, correct=False)  # incorrect: never the best speedup
    verify_stored("tenant-b", candidate("other"), 7.0)
    with session_scope() as session:
        problem_id = record_problem(session, PROBLEM).id
    agent = clients["agent"]
    a, b = tenants.header(tenants.a), tenants.header(tenants.b)

    (summary,) = agent.get("/v1/problems", headers=a).json()
    assert summary["id"] == problem_id
    assert (summary["verifications"], summary["best_speedup"]) == (3, 2.5)
    detail = agent.get(f"/v1/problems/{problem_id}", headers=a).json()
    assert [c["candidate_key"] for c in detail["candidates"]][:2] == [slow.key, fast.key]
    assert [c["speedup_vs_eager"] for c in detail["candidates"]] == [1.2, 2.5, 9.0]
    assert detail["source"] == PROBLEM
    # tenant-b verified on the same problem: it sees the problem with its own verification only.
    theirs = agent.get(f"/v1/problems/{problem_id}", headers=b).json()
    assert [c["speedup_vs_eager"] for c in theirs["candidates"]] == [7.0]

    assert agent.get(f"/v1/candidates/{fast.key}", headers=a).json()["files"] == fast.files
    assert agent.get(f"/v1/candidates/{fast.key}", headers=b).status_code == 404
    assert agent.get("/v1/problems/0123456789abcdef", headers=a).status_code == 404


def test_a_problem_nobody_of_the_tenant_worked_on_is_not_found(tenants: Tenants, clients: Clients) -> None:
    verify_stored("tenant-a", candidate("only-a"), 1.5)
    with session_scope() as session:
        problem_id = record_problem(session, PROBLEM).id
    answer = clients["agent"].get(f"/v1/problems/{problem_id}", headers=tenants.header(tenants.b))
    assert answer.status_code == 404
    assert clients["agent"].get("/v1/problems", headers=tenants.header(tenants.b)).json() == []
