"""Fixtures: the deployment manifests, parsed once per session."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from deploy_manifests import COMPOSE_FILE, load_k8s_documents


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="session")
def k8s_docs() -> list[tuple[str, dict[str, Any]]]:
    return load_k8s_documents()


@pytest.fixture(scope="session")
def k8s_objects(k8s_docs: list[tuple[str, dict[str, Any]]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Cluster objects by (kind, name); the Kustomization is not one."""
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for _, doc in k8s_docs:
        if doc["kind"] == "Kustomization":
            continue
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in objects, f"{key} is defined twice under k8s/"
        objects[key] = doc
    return objects
