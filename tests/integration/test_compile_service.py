"""compile_svc over HTTP: POST /v1/compile through a real compile worker, the result row in Postgres, and the
artifact fetched by a GPU-side host (another data dir) through GET /v1/artifacts/{key} with a service key."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from cuda_agent.compile import ensure_artifact, has_artifact
from cuda_agent.db.models import CompileResultRow
from tests.integration.conftest import start_api

pytestmark = [pytest.mark.integration, pytest.mark.sandbox]

KERNEL = """#include <cstdint>
extern "C" void scale(const float* x, float* y, float k, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = k * x[i];
}
"""


def test_compile_route_worker_result_and_artifact_fetch(stack_env, spawn, pg_url, api_key, auth, tmp_path, monkeypatch):
    spawn(["worker", "compile", "--concurrency", "1"], stack_env, "worker-compile")
    base = start_api(spawn, stack_env, "compile")
    body = {
        "candidate": {"form": "project", "files": {"model_new.py": "x = 1\n", "kernels/scale.cpp": KERNEL}},
        "device": "cpu",
    }
    response = httpx.post(f"{base}/v1/compile", params={"wait_s": 120}, json=body, headers=auth, timeout=150)
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    result = job["result"]
    assert result["status"] == "ok" and result["artifact_key"], result

    engine = create_engine(pg_url)
    with Session(engine) as session:
        row = session.scalars(select(CompileResultRow).where(CompileResultRow.job_id == job["id"])).one()
        assert row.status.value == "ok" and row.artifact_key == result["artifact_key"]
    engine.dispose()

    assert httpx.get(f"{base}/v1/artifacts/{'0' * 64}", headers=auth, timeout=10).status_code == 404
    assert httpx.get(f"{base}/v1/artifacts/{result['artifact_key']}", timeout=10).status_code == 401

    # A GPU worker on another host: its own empty data dir, the service key, the compile service's URL.
    from cuda_agent.settings import get_settings

    monkeypatch.setenv("CUDA_AGENT_DATA_DIR", str(tmp_path / "gpu-host"))
    monkeypatch.setenv("CUDA_AGENT_SERVICE_API_KEY", api_key)
    get_settings.cache_clear()
    assert not has_artifact(result["artifact_key"])
    fetched = ensure_artifact(result["artifact_key"], base_url=base)
    assert fetched.is_dir() and any(fetched.rglob("*.so"))
