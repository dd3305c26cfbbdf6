"""The app factory every service uses, so /healthz, /readyz, /metrics, body limits and error shapes are the same
everywhere."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cuda_agent import __version__
from cuda_agent.api.auth import require_tenant
from cuda_agent.api.jobs import jobs_router
from cuda_agent.api.readiness import check_readiness
from cuda_agent.dashboard import MOUNT_PATH, dashboard_app
from cuda_agent.jobs import JobNotFound
from cuda_agent.settings import get_settings

# How much of a rejected input a validation error echoes back: enough to recognize it, never the whole body.
ECHO_CHARS = 200
ECHO_ITEMS = 20


class BodySizeLimit:
    """413 for a request body over settings.max_request_bytes: at once when Content-Length says so, else as soon
    as the streamed body passes it (chunked uploads declare no length), before any of it is parsed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = get_settings().max_request_bytes
        too_large = HTTPException(413, f"request body larger than {limit} bytes (the service's max_request_bytes)")
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            response = JSONResponse(status_code=413, content={"detail": too_large.detail})
            await response(scope, receive, send)
            return
        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise too_large  # FastAPI re-raises an HTTPException met while reading the body
            return message

        await self.app(scope, counted_receive, send)


def _echo(value: Any, depth: int = 0) -> Any:
    """``value`` (already JSON-encodable) cut to a short, always-serializable echo: non-finite numbers and text
    that is not valid Unicode become strings JSON and UTF-8 take, long text and containers are shortened."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        text = value if len(value) <= ECHO_CHARS else value[:ECHO_CHARS] + "..."
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        if depth >= 3:
            return f"<object of {len(value)} keys>"
        return {_echo(k, depth + 1): _echo(v, depth + 1) for k, v in list(value.items())[:ECHO_ITEMS]}
    if isinstance(value, list):
        if depth >= 3:
            return f"<array of {len(value)} items>"
        return [_echo(v, depth + 1) for v in value[:ECHO_ITEMS]]
    return value


def _operation_id(route: APIRoute) -> str:
    # "{tag}-{name}" ids let a typed client be generated for service-to-service calls.
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


def create_app(service: str, routers: list[APIRouter]) -> FastAPI:
    """A FastAPI app for ``service`` with the shared routes plus the service's own ``/v1`` routers."""
    app = FastAPI(title=f"cuda-agent {service}", version=__version__, generate_unique_id_function=_operation_id)
    app.add_middleware(BodySizeLimit)
    registry = CollectorRegistry()
    requests = Counter("http_requests", "HTTP requests", ["service", "method", "route", "status"], registry=registry)
    latency = Histogram("http_request_seconds", "HTTP latency", ["service", "method", "route"], registry=registry)

    @app.middleware("http")
    async def _metrics(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = route.path if isinstance(route, APIRoute) else "unmatched"
        requests.labels(service, request.method, path, str(response.status_code)).inc()
        latency.labels(service, request.method, path).observe(time.perf_counter() - started)
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler echoes each input whole: a NaN, a lone surrogate or a 16 MB body would turn the
        # 422 into a 500 (or a 16 MB answer).
        return JSONResponse(status_code=422, content={"detail": _echo(jsonable_encoder(exc.errors()))})

    @app.exception_handler(JobNotFound)
    async def _job_not_found(_request: Request, exc: JobNotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": f"job {exc.args[0]} not found"})

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok", "service": service}

    @app.get("/readyz", tags=["health"])
    def readyz() -> JSONResponse:
        """Readiness: the database and the broker answer."""
        checks = check_readiness()
        ready = all(c["ok"] for c in checks.values())
        return JSONResponse(status_code=200 if ready else 503, content={"ready": ready, "checks": checks})

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    def metrics() -> Response:
        """Prometheus metrics."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    for router in [jobs_router, *routers]:
        app.include_router(router, prefix="/v1", dependencies=[Depends(require_tenant)])
    app.mount(MOUNT_PATH, dashboard_app(), name="dashboard")
    return app
