"""deploy/docker: what the Dockerfiles promise (no engine here to build them), and the real behaviour of the
entrypoint and healthcheck scripts the images run."""

from __future__ import annotations

import fnmatch
import http.server
import os
import re
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_manifests import REPO

DOCKER_DIR = REPO / "deploy" / "docker"
ENTRYPOINT = DOCKER_DIR / "entrypoint.sh"
HEALTHCHECK = DOCKER_DIR / "healthcheck.py"


def _final_stage(dockerfile: Path) -> list[str]:
    lines = [line.strip() for line in dockerfile.read_text().splitlines()]
    last_from = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    return lines[last_from:]


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.gpu"])
def test_dockerfile_runtime_stage(name: str) -> None:
    stage = _final_stage(DOCKER_DIR / name)
    user = [line.split()[1] for line in stage if line.startswith("USER ")]
    assert user and user[-1] not in ("root", "0"), "the services must not run as root"
    assert any(line.startswith("HEALTHCHECK ") and "healthcheck.py" in line for line in stage)
    assert 'ENTRYPOINT ["tini", "--", "entrypoint.sh"]' in stage
    assert any("bubblewrap" in line for line in stage), "the sandbox needs bwrap at run time"


def test_gpu_image_is_cuda_13_devel_on_ubuntu_24_04() -> None:
    text = (DOCKER_DIR / "Dockerfile.gpu").read_text()
    assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:13\.0\.\d+-devel-ubuntu24\.04$", text, re.MULTILINE)


def test_build_context_keeps_what_the_images_copy() -> None:
    ignored = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    needed = ["pyproject.toml", "alembic.ini", "cuda_agent", "services", "deploy/docker/entrypoint.sh"]
    for path in needed:
        assert not any(fnmatch.fnmatch(path, pattern) for pattern in ignored), f".dockerignore drops {path}"
    for script in (ENTRYPOINT, HEALTHCHECK):
        assert script.stat().st_mode & stat.S_IXUSR, f"{script.name} must be executable"


def _run_entrypoint(args: list[str], tmp_path: Path) -> str:
    # The real cuda-agent console script is the lead's; a recorder in its place shows how it is called.
    fake = tmp_path / "cuda-agent"
    fake.write_text('#!/bin/sh\necho "cuda-agent $*"\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    return subprocess.run([str(ENTRYPOINT), *args], capture_output=True, text=True, env=env, check=True).stdout


def test_entrypoint_routes_platform_commands_to_the_cli(tmp_path: Path) -> None:
    assert (
        _run_entrypoint(["worker", "eval", "--concurrency", "1"], tmp_path)
        == "cuda-agent worker eval --concurrency 1\n"
    )
    assert _run_entrypoint(["db", "upgrade"], tmp_path) == "cuda-agent db upgrade\n"
    assert _run_entrypoint(["echo", "plain command"], tmp_path) == "plain command\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api_port() -> Iterator[tuple[int, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler
    server.shutdown()


def _healthcheck(*cmdline: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), *cmdline], capture_output=True, text=True, env=env, timeout=60
    )


def test_healthcheck_probes_the_api_port(api_port: tuple[int, type[_Handler]]) -> None:
    port, handler = api_port
    cmdline = ["tini", "--", "entrypoint.sh", "serve", "eval", "--host", "0.0.0.0", "--port", str(port)]
    assert _healthcheck(*cmdline).returncode == 0
    handler.status = 503
    failed = _healthcheck(*cmdline)
    assert failed.returncode == 1
    assert failed.stderr.startswith("unhealthy: ") and "503" in failed.stderr


def test_healthcheck_fails_when_nothing_listens() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        result = _healthcheck("serve", "compile", f"--port={port}")
    assert result.returncode == 1
    assert "refused" in result.stderr.lower()


def test_healthcheck_passes_one_shot_commands() -> None:
    assert _healthcheck("tini", "--", "entrypoint.sh", "db", "upgrade").returncode == 0


@pytest.mark.integration
@pytest.mark.slow  # starts a Celery worker and waits for its ping
def test_healthcheck_pings_this_hosts_celery_worker() -> None:
    # A database of its own, so other suites' workers on this machine cannot answer for ours.
    broker = "redis://127.0.0.1:6379/14"
    env = {**os.environ, "REDIS_URL": broker}
    missing = _healthcheck("worker", "eval", env=env)
    assert missing.returncode == 1
    assert "no Celery worker" in missing.stderr

    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "--broker", broker, "worker", "--pool", "solo",
         "--hostname", f"celery@{socket.gethostname()}", "--without-mingle", "--without-gossip"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(30):
            if _healthcheck("worker", "eval", env=env).returncode == 0:
                break
        else:
            pytest.fail("the healthcheck never saw the running worker")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
