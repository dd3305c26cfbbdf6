"""k8s/: every manifest against its JSON schema (offline), then the platform's own rules."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml
from deploy_manifests import API_SERVICES, K8S_DIR, REPO, SCHEMA_DIR, load_k8s_documents

from cuda_agent.contracts.common import QueueName
from cuda_agent.queue.app import GPU_QUEUES

# Oldest Kubernetes the manifests target: pod-level appArmorProfile is GA from 1.30.
KUBERNETES_VERSION = "1.30"
# Kinds without a schema in kubernetes-validate: the hand-written ones in schemas/.
LOCAL_SCHEMAS = {
    ("keda.sh/v1alpha1", "ScaledObject"): "keda-scaledobject.schema.json",
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"): "kustomization.schema.json",
}

Objects = dict[tuple[str, str], dict[str, Any]]


def _schema_error(doc: dict[str, Any]) -> str | None:
    """The first schema violation of one manifest, or None. Strict: unknown fields are errors."""
    local = LOCAL_SCHEMAS.get((doc.get("apiVersion"), doc.get("kind")))
    if local:
        schema = json.loads((SCHEMA_DIR / local).read_text())
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(doc))
        return None if error is None else f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{'/'.join(map(str, exc.path))}: {exc.message}"
    except kubernetes_validate.SchemaNotFoundError as exc:
        return exc.message
    return None


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return workload["spec"]["template"]["spec"]["containers"]


def _worker_deployments(objects: Objects) -> dict[str, dict[str, Any]]:
    """queue -> the Deployment whose container runs `worker QUEUE...`."""
    found: dict[str, dict[str, Any]] = {}
    for (kind, _), doc in objects.items():
        if kind != "Deployment":
            continue
        args = _containers(doc)[0].get("args", [])
        if args[:1] == ["worker"]:
            for queue in args[1 : args.index("--concurrency")]:
                assert queue not in found, f"queue {queue} is consumed by two Deployments"
                found[queue] = doc
    return found


@pytest.mark.parametrize(
    ("file", "doc"),
    [
        pytest.param(f, d, id=f"{f}:{d['kind']}/{d.get('metadata', {}).get('name', '')}")
        for f, d in load_k8s_documents()
    ],
)
def test_manifest_matches_its_schema(file: str, doc: dict[str, Any]) -> None:
    assert _schema_error(doc) is None, f"{file}: {_schema_error(doc)}"


def test_schemas_reject_broken_manifests(k8s_objects: Objects) -> None:
    deployment = copy.deepcopy(k8s_objects[("Deployment", "eval-api")])
    _containers(deployment)[0]["livenesProbe"] = _containers(deployment)[0].pop("livenessProbe")
    assert "livenesProbe" in (_schema_error(deployment) or "")

    scaled = copy.deepcopy(k8s_objects[("ScaledObject", "eval-worker")])
    scaled["spec"]["triggers"][0]["metadata"]["listLength"] = 5  # KEDA wants strings
    assert _schema_error(scaled) is not None
    scaled["spec"]["triggers"][0]["metadata"]["listLength"] = "5"
    scaled["spec"]["minReplicas"] = 1  # the HPA's field name, not KEDA's
    assert "minReplicas" in (_schema_error(scaled) or "")


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    files = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    assert not list(K8S_DIR.glob("*.yml")), "use the .yaml extension so the tests find every manifest"


def _scaled_object(objects: Objects, deployment: str) -> dict[str, Any]:
    scaled = [
        d for (k, _), d in objects.items() if k == "ScaledObject" and d["spec"]["scaleTargetRef"]["name"] == deployment
    ]
    assert len(scaled) == 1, f"{deployment} needs exactly one ScaledObject"
    return scaled[0]


@pytest.mark.parametrize("queue", list(QueueName))
def test_every_queue_has_a_worker_scaled_on_its_redis_list(k8s_objects: Objects, queue: QueueName) -> None:
    workers = _worker_deployments(k8s_objects)
    assert queue.value in workers, f"no Deployment runs `worker {queue.value}`"
    deployment = workers[queue.value]
    name = deployment["metadata"]["name"]
    assert "replicas" not in deployment["spec"], f"{name}: KEDA owns the replica count"

    (trigger,) = _scaled_object(k8s_objects, name)["spec"]["triggers"]
    assert trigger["type"] == "redis"
    assert trigger["metadata"]["listName"] == queue.value
    # KEDA's operator resolves the address from its own namespace: it must be the Redis Service's full name.
    namespace = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())["namespace"]
    assert ("Service", "redis") in k8s_objects
    assert trigger["metadata"]["address"] == f"redis.{namespace}.svc.cluster.local:6379"


@pytest.mark.parametrize("queue", list(QueueName))
def test_gpu_workers_hold_one_gpu_on_gpu_nodes(k8s_objects: Objects, queue: QueueName) -> None:
    deployment = _worker_deployments(k8s_objects)[queue.value]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    limits = container["resources"]["limits"]
    if queue in GPU_QUEUES:
        assert limits["nvidia.com/gpu"] == 1
        assert container["args"][container["args"].index("--concurrency") + 1] == "1"
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert pod["nodeSelector"], "GPU pods must be pinned to GPU nodes"
        assert {"name": "CUDA_AGENT_GPU_INDEX", "value": "0"} in container["env"]
    else:
        assert "nvidia.com/gpu" not in limits
        assert "tolerations" not in pod


# Queues whose worker keeps a warm pod: a caller waits for the result (POST /v1/compile, up to 30 s). Every other
# worker, and every GPU one, scales to zero, so an idle queue holds no node (a GPU node each for GPU queues).
WARM_QUEUES = frozenset({QueueName.COMPILE})


@pytest.mark.parametrize("queue", list(QueueName))
def test_idle_workers_hold_no_pods(k8s_objects: Objects, queue: QueueName) -> None:
    assert not WARM_QUEUES & GPU_QUEUES
    scaled = _scaled_object(k8s_objects, _worker_deployments(k8s_objects)[queue.value]["metadata"]["name"])
    assert scaled["spec"]["minReplicaCount"] == (1 if queue in WARM_QUEUES else 0)
    # From zero, KEDA starts a pod once the list is longer than this: one waiting task must be enough.
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["metadata"].get("activationListLength", "0") == "0"


@pytest.mark.parametrize("api", API_SERVICES)
def test_every_api_has_probes_a_service_and_an_hpa(k8s_objects: Objects, api: str) -> None:
    name = f"{api}-api"
    deployment = k8s_objects[("Deployment", name)]
    assert "replicas" not in deployment["spec"], f"{name}: the HPA owns the replica count"
    (container,) = _containers(deployment)
    assert container["args"][:2] == ["serve", api]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        assert container[probe]["httpGet"]["path"] == path, f"{name}: {probe}"
        assert container[probe]["httpGet"]["port"] in ports, f"{name}: {probe} names an undeclared port"
    assert container["resources"]["requests"] and container["resources"]["limits"]

    service = k8s_objects[("Service", name)]
    assert all(p["targetPort"] in ports for p in service["spec"]["ports"])
    hpa = k8s_objects[("HorizontalPodAutoscaler", name)]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}


def test_services_select_pods(k8s_objects: Objects) -> None:
    templates = [
        d["spec"]["template"]["metadata"]["labels"]
        for (k, _), d in k8s_objects.items()
        if "template" in d.get("spec", {})
    ]
    for (kind, name), doc in k8s_objects.items():
        if kind == "Service":
            selector = doc["spec"]["selector"].items()
            assert any(selector <= labels.items() for labels in templates), f"Service {name} selects no pod"


def test_workload_references_resolve(k8s_objects: Objects) -> None:
    claims = {name for kind, name in k8s_objects if kind == "PersistentVolumeClaim"}
    for (kind, name), doc in k8s_objects.items():
        if "template" not in doc.get("spec", {}):
            continue
        pod = doc["spec"]["template"]["spec"]
        templates = {t["metadata"]["name"] for t in doc["spec"].get("volumeClaimTemplates", [])}
        for volume in pod.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, f"{kind}/{name}: {volume}"
        for container in pod["containers"]:
            mounts = {v["name"] for v in pod.get("volumes", [])} | templates
            assert {m["name"] for m in container.get("volumeMounts", [])} <= mounts, f"{kind}/{name}"
            for source in container.get("envFrom", []):
                ref_kind, ref = (
                    ("ConfigMap", source["configMapRef"])
                    if "configMapRef" in source
                    else ("Secret", source["secretRef"])
                )
                assert (ref_kind, ref["name"]) in k8s_objects, f"{kind}/{name} reads missing {ref_kind} {ref['name']}"
            for env in container.get("env", []):
                key_ref = env.get("valueFrom", {}).get("secretKeyRef")
                if key_ref:
                    secret = k8s_objects[("Secret", key_ref["name"])]
                    assert key_ref["key"] in secret["stringData"], f"{kind}/{name}: {env['name']}"


def test_config_points_at_the_cluster_services(k8s_objects: Objects) -> None:
    config = k8s_objects[("ConfigMap", "cuda-agent-config")]["data"]
    secret = k8s_objects[("Secret", "cuda-agent-secrets")]["stringData"]
    for url, service in (
        (config["REDIS_URL"], "redis"),
        (config["CUDA_AGENT_COMPILE_SERVICE_URL"], "compile-api"),
        (secret["DATABASE_URL"], "postgres"),
    ):
        parts = urlsplit(url)
        assert parts.hostname == service and ("Service", service) in k8s_objects, url
        ports = [p["port"] for p in k8s_objects[("Service", service)]["spec"]["ports"]]
        assert parts.port in ports, url
    assert urlsplit(secret["DATABASE_URL"]).password == secret["POSTGRES_PASSWORD"]
    assert secret["DATABASE_URL"].startswith("postgresql+psycopg://")


def test_migration_job_upgrades_the_schema(k8s_objects: Objects) -> None:
    job = k8s_objects[("Job", "cuda-agent-migrate")]
    assert _containers(job)[0]["args"] == ["db", "upgrade"]
    # A Job's pod template cannot change: without a TTL the next apply with a new image would be rejected.
    assert job["spec"]["ttlSecondsAfterFinished"] > 0


def test_images_match_compose(k8s_objects: Objects, compose: dict[str, Any]) -> None:
    """The same service runs the same image (CPU or CUDA) under compose and Kubernetes."""
    for (kind, name), doc in k8s_objects.items():
        if kind == "Deployment":
            k8s_image = _containers(doc)[0]["image"].split(":")[0]
            compose_image = compose["services"][name]["image"].split(":")[0]
            assert k8s_image == compose_image, name


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_renders_into_one_namespace() -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(K8S_DIR)], capture_output=True, text=True, check=True, cwd=REPO, timeout=120
    ).stdout
    objects = [d for d in yaml.safe_load_all(rendered) if d]
    assert len(objects) == len([d for _, d in load_k8s_documents() if d["kind"] != "Kustomization"])
    for doc in objects:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "cuda-agent", f"{doc['kind']}/{doc['metadata']['name']}"
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "cuda-agent"
