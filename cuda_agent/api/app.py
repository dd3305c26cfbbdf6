"""The app factory every service uses, so /healthz, /readyz, /metrics and error shapes are the same everywhere."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from cuda_agent import __version__
from cuda_agent.api.auth import require_tenant
from cuda_agent.api.jobs import jobs_router
from cuda_agent.api.readiness import check_readiness
from cuda_agent.jobs import JobNotFound


def _operation_id(route: APIRoute) -> str:
    # "{tag}-{name}" ids let a typed client be generated for service-to-service calls.
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


def create_app(service: str, routers: list[APIRouter]) -> FastAPI:
    """A FastAPI app for ``service`` with the shared routes plus the service's own ``/v1`` routers."""
    app = FastAPI(title=f"cuda-agent {service}", version=__version__, generate_unique_id_function=_operation_id)
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
    return app
