"""dataset_svc HTTP adapter."""

from __future__ import annotations

from cuda_agent.api import create_app

app = create_app("dataset", [])
