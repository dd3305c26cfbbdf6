"""Schemathesis over a service app's OpenAPI schema, in-process: every operation gets generated valid and invalid
requests with a valid API key, and any 5xx (or an exception out of the app) is a failure.

The tests (tests/api) and `cuda-agent selftest` call ``fuzz_app``. Schemathesis is a dev dependency, imported
here only when called. Submitted jobs must not run during a fuzz: point the app at a broker with no worker
consuming it (settings.redis_url), so that they are stored and queued only.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

# Query parameters that make a route wait for its job: with no worker they would wait their whole bound.
NO_WAIT = {"wait_s": 0}


@dataclass
class FuzzFailure:
    operation: str  # "POST /v1/compile"
    status: int | None  # None: the app raised instead of answering
    detail: str  # the response body or the exception, shortened
    request: str  # how to reproduce: method, path, query and body, shortened


@dataclass
class FuzzReport:
    operations: int = 0
    tried: int = 0
    failures: list[FuzzFailure] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return len(self.failures)


def _shorten(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def fuzz_app(app: Any, api_key: str, max_examples: int = 25) -> FuzzReport:
    """Fuzz every operation of ``app`` (a FastAPI app) with ``max_examples`` valid and as many invalid requests;
    return what was tried and each 5xx."""
    try:
        import schemathesis
        from hypothesis import HealthCheck, Phase, given
        from hypothesis import settings as hypothesis_settings
        from hypothesis.errors import Unsatisfiable
        from schemathesis.core.result import Err
        from schemathesis.generation import GenerationMode
    except ImportError as exc:  # a dev extra: services do not ship it
        raise RuntimeError(f"fuzzing needs schemathesis (pip install -e '.[dev]'): {exc}") from None

    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {"Authorization": f"Bearer {api_key}"}
    report = FuzzReport()

    def fuzz_operation(label: str, strategy: Any) -> None:
        @hypothesis_settings(
            max_examples=max_examples,
            deadline=None,
            database=None,  # every run starts fresh: a report counts this run only
            phases=[Phase.generate],  # no shrinking: each 5xx is counted, not minimized
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def exercise(case: Any) -> None:
            report.tried += 1
            where = _shorten(f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r}")
            try:
                response = case.call(headers=headers)
            except Exception as exc:  # the app raised: a 500 on a real server
                report.failures.append(FuzzFailure(label, None, _shorten(repr(exc)), where))
                return
            if response.status_code >= 500:
                report.failures.append(FuzzFailure(label, response.status_code, _shorten(response.text), where))

        # Unsatisfiable: every input the schema allows is valid (an unconstrained string), so no invalid case.
        with contextlib.suppress(Unsatisfiable):
            exercise()

    for result in schema.get_all_operations():
        report.operations += 1
        if isinstance(result, Err):  # an operation whose schema cannot be used is a failure of the service
            error = result.err()
            report.failures.append(FuzzFailure("(schema)", None, _shorten(str(error)), "-"))
            continue
        operation = result.ok()
        query_names = {p.name for p in operation.query}
        fixed_query = {k: v for k, v in NO_WAIT.items() if k in query_names} or None
        has_inputs = any((operation.path_parameters, operation.query, operation.headers, operation.body))
        # An operation without parameters or body has no invalid request (hypothesis would call that unsatisfiable).
        modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if has_inputs else (GenerationMode.POSITIVE,)
        for mode in modes:
            strategy = operation.as_strategy(generation_mode=mode, query=fixed_query)
            fuzz_operation(f"{operation.method.upper()} {operation.path}", strategy)
    return report
