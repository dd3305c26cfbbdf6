"""docker-compose.yml: the compose-spec JSON schema, then the platform's own rules."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from check_jsonschema.builtin_schemas import get_builtin_schema
from deploy_manifests import API_SERVICES, REPO

from cuda_agent.contracts.common import QueueName
from cuda_agent.queue.app import GPU_QUEUES

# The workers that run candidate code in bubblewrap, the only services allowed relaxed container security.
SANDBOXING_QUEUES = {QueueName.COMPILE, QueueName.EVAL, QueueName.PROFILE, QueueName.ROLLOUT}


def _schema_errors(doc: dict[str, Any]) -> list[str]:
    # The compose-spec schema as vendored by check-jsonschema (the official compose-spec.json).
    validator = jsonschema.Draft202012Validator(get_builtin_schema("vendor.compose-spec"))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def _workers(compose: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """queue -> (service name, service) for every `worker QUEUE...` service."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, svc in compose["services"].items():
        command = svc.get("command") or []
        if command[:1] == ["worker"]:
            queues = command[1 : command.index("--concurrency")] if "--concurrency" in command else command[1:]
            for queue in queues:
                assert queue not in found, f"queue {queue} is consumed by both {found[queue][0]} and {name}"
                found[queue] = (name, svc)
    return found


def _gpu_devices(svc: dict[str, Any]) -> list[dict[str, Any]]:
    devices = svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    return [d for d in devices if d.get("driver") == "nvidia"]


def test_compose_file_matches_the_compose_spec(compose: dict[str, Any]) -> None:
    assert _schema_errors(compose) == []


def test_compose_schema_rejects_a_misspelt_field(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["eval-api"]["helthcheck"] = broken["services"]["eval-api"].pop("healthcheck")
    assert any("helthcheck" in error for error in _schema_errors(broken))


@pytest.mark.parametrize("queue", list(QueueName))
def test_every_queue_has_one_worker(compose: dict[str, Any], queue: QueueName) -> None:
    workers = _workers(compose)
    assert queue.value in workers, f"no compose service runs `worker {queue.value}`"
    name, svc = workers[queue.value]
    command = svc["command"]
    gpus = _gpu_devices(svc)
    if queue in GPU_QUEUES:
        assert command[command.index("--concurrency") + 1] == "1", f"{name}: a GPU worker runs one task at a time"
        assert gpus == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}], f"{name} must reserve one GPU"
        assert svc["environment"]["CUDA_AGENT_GPU_INDEX"] == "0"
        assert svc["image"].startswith("cuda-agent-gpu:")
    else:
        assert gpus == [], f"{name} reserves a GPU its queue does not use"


def test_only_sandboxing_workers_relax_container_security(compose: dict[str, Any]) -> None:
    sandboxing = {name for queue, (name, _) in _workers(compose).items() if queue in SANDBOXING_QUEUES}
    relaxed = {name for name, svc in compose["services"].items() if svc.get("security_opt") or svc.get("cap_add")}
    assert relaxed == sandboxing
    for name in sandboxing:
        assert "seccomp=unconfined" in compose["services"][name]["security_opt"]


@pytest.mark.parametrize("api", API_SERVICES)
def test_every_api_serves_with_a_healthcheck_after_migration(compose: dict[str, Any], api: str) -> None:
    svc = compose["services"][f"{api}-api"]
    assert svc["command"][:2] == ["serve", api]
    assert svc["healthcheck"]["test"] == ["CMD", "healthcheck.py"], "probes /healthz through the image's script"
    assert svc["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert svc["depends_on"]["redis"] == {"condition": "service_healthy"}


def test_depends_on_graph_is_sound(compose: dict[str, Any]) -> None:
    services = compose["services"]
    graph: dict[str, set[str]] = {}
    for name, svc in services.items():
        deps = svc.get("depends_on", {})
        assert isinstance(deps, dict), f"{name}: depends_on must name a condition for each dependency"
        for dep, spec in deps.items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy, {dep} has no healthcheck"
            elif spec["condition"] == "service_completed_successfully":
                assert services[dep].get("restart") == "no", f"{dep} is one-shot and must not restart"
        graph[name] = set(deps)

    # Depth-first search for a cycle: compose would refuse to start one.
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        if state.get(node) == "done":
            return
        assert state.get(node) != "active", f"depends_on cycle: {' -> '.join([*path, node])}"
        state[node] = "active"
        for dep in graph[node]:
            visit(dep, [*path, node])
        state[node] = "done"

    for node in graph:
        visit(node, [])


def test_migrate_runs_once_after_postgres(compose: dict[str, Any]) -> None:
    migrate = compose["services"]["migrate"]
    assert migrate["command"] == ["db", "upgrade"]
    assert migrate["depends_on"]["postgres"] == {"condition": "service_healthy"}


def test_broker_keeps_queued_jobs_across_restarts(compose: dict[str, Any]) -> None:
    command = compose["services"]["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert compose["services"]["redis"]["volumes"], "the append-only file must live on a volume"


def test_platform_services_share_settings_and_data(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        if not svc["image"].startswith("cuda-agent"):
            continue
        env = svc["environment"]
        assert env["DATABASE_URL"].startswith("postgresql+psycopg://"), name
        assert env["REDIS_URL"].startswith("redis://redis:"), name
        assert env["CUDA_AGENT_DATA_DIR"] == "/data", name
        assert env["CUDA_AGENT_COMPILE_SERVICE_URL"] == "http://compile-api:8000", name
        assert "data:/data" in svc["volumes"], name


def test_named_volumes_and_build_files_exist(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    for name, svc in compose["services"].items():
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name} mounts undeclared volume {source}"
        if "build" in svc:
            dockerfile = Path(REPO, svc["build"]["context"], svc["build"]["dockerfile"])
            assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"
