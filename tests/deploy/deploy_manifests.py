"""Paths and loading of the deployment manifests, shared by the tests of tests/deploy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S_DIR = REPO / "k8s"
COMPOSE_FILE = REPO / "docker-compose.yml"
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

# The five HTTP services (`cuda-agent serve NAME`); each is NAME-api in compose and in k8s.
API_SERVICES = ("compile", "eval", "agent", "trainer", "dataset")


def load_k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    """(file name, document) for every non-empty YAML document under k8s/, in file order."""
    docs = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        docs.extend((path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc)
    return docs
