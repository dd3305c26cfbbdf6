"""POST /v1/optimize end to end on the cpu device: the agent API, real Celery workers for the rollout, compile and
eval queues, and a local OpenAI-compatible server scripted to write a kernel, hit a compile error, fix it,
verify, break it, and finish. The job, the trajectory and every compile and eval result land in Postgres."""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from cuda_agent.db.models import CompileResultRow, EvalResultRow, Trajectory, Turn
from tests.agent.agent_fixtures import PROBLEM
from tests.agent.test_rollout_e2e import MODEL_NEW, SCRIPT
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.conftest import start_api, wait_job

pytestmark = [pytest.mark.integration, pytest.mark.sandbox]


def optimize_body() -> dict:
    return {
        "problem_source": PROBLEM,
        "policy": "openai",
        "policy_options": {"endpoint": "fake"},  # the operator's endpoint, configured on the API and workers
        "config": {
            "device": "cpu",
            "max_turns": 12,
            "correctness_trials": 2,
            "timing_trials": 5,
            "warmup": 1,
            "measure_baselines": False,
        },
    }


@pytest.mark.slow
def test_optimize_through_the_services(stack_env, spawn, pg_url, auth):
    with FakeOpenAIServer(SCRIPT) as server:
        endpoints = {"fake": {"base_url": server.base_url, "model": "fake-model", "api_key": "test"}}
        env = {**stack_env, "CUDA_AGENT_MAX_CONCURRENT_JOBS": "1", "CUDA_AGENT_LLM_ENDPOINTS": json.dumps(endpoints)}
        for queue in ("rollout", "compile", "eval"):
            spawn(["worker", queue, "--concurrency", "1"], env, f"worker-{queue}")
        base = start_api(spawn, env, "agent")

        response = httpx.post(f"{base}/v1/optimize", json=optimize_body(), headers=auth, timeout=10)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]

        # One optimize job at a time for this tenant: the second is refused with a clear 429.
        second = httpx.post(f"{base}/v1/optimize", json=optimize_body(), headers=auth, timeout=10)
        assert second.status_code == 429 and "limit 1" in second.json()["detail"]

        job = wait_job(base, job_id, {"succeeded", "failed"}, auth, timeout=600)

    assert job["status"] == "succeeded", job
    result = job["result"]
    assert result["termination"] == "finished"
    best = result["best"]
    assert best["turn"] == 4 and best["result"]["status"] == "correct"  # the best, not the last (broken) one
    assert "a[i] + b[i];" in best["candidate"]["files"]["kernels/add.cpp"]
    assert result["model_new"] == MODEL_NEW

    # The event stream replays the finished job.
    with httpx.stream("GET", f"{base}/v1/jobs/{job_id}/events", headers=auth, timeout=30) as stream:
        events = [line for line in stream.iter_lines() if line.startswith("data: ")]
    assert json.loads(events[-1][6:])["status"] == "succeeded"

    trajectory = httpx.get(f"{base}/v1/trajectories/{result['trajectory_id']}", headers=auth, timeout=10).json()
    assert len(trajectory["turns"]) == result["turns"] == 7

    engine = create_engine(pg_url)
    with Session(engine) as session:
        row = session.get(Trajectory, result["trajectory_id"])
        assert row is not None and row.job_id == job_id and row.best_reward == 1.0
        assert session.scalar(select(func.count()).select_from(Turn).where(Turn.trajectory_id == row.id)) == 7
        compiles = [r.status.value for r in session.scalars(select(CompileResultRow))]
        assert "compile_error" in compiles and "ok" in compiles
        verdicts = sorted(r.status.value for r in session.scalars(select(EvalResultRow)))
        # The rollout's two verdicts, then the returned kernel judged once more (the job's confirmation).
        assert verdicts == ["correct", "correct", "incorrect"]
        assert result["confirmation"]["correct"] is True
    engine.dispose()
