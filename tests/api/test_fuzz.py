"""Schemathesis over every service's OpenAPI schema, valid and invalid requests with a valid key: never a 5xx."""

from __future__ import annotations

import pytest

from cuda_agent.api.fuzz import fuzz_app
from tests.api.conftest import SERVICES, Tenants, service_app

pytestmark = pytest.mark.integration

# Per operation and mode (valid, invalid): bounded so that all five services take about a minute.
EXAMPLES = 10


@pytest.mark.parametrize("service", SERVICES)
def test_no_server_errors(service: str, queued_stack: Tenants) -> None:
    report = fuzz_app(service_app(service), queued_stack.a, max_examples=EXAMPLES)
    assert report.operations >= 7 and report.tried >= report.operations * 2
    assert report.failed == 0, "\n".join(
        f"{f.operation} -> {f.status}: {f.detail}\n  {f.request}" for f in report.failures
    )
