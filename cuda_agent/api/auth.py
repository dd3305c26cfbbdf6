"""API keys, tenants and per-tenant rate limits.

Keys are random 256-bit tokens shown once at creation; only their SHA-256 is stored. Every /v1 route resolves
the caller's tenant through ``require_tenant``; jobs, trajectories and artifacts are filtered by it. The
operator's service key (settings.service_api_key), which workers send to other services, resolves to
``SERVICE_TENANT``: a name no key can be created for, owning no jobs, allowed to fetch any artifact.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Header, HTTPException, status
from sqlalchemy import select

from cuda_agent.db import session_scope
from cuda_agent.db.models import ApiKey
from cuda_agent.logging import get_logger
from cuda_agent.settings import Settings, get_settings

if TYPE_CHECKING:
    import redis

log = get_logger(__name__)

KEY_PREFIX = "ca_"
LOCAL_TENANT = "local"  # the tenant of every request when auth_required is off
SERVICE_TENANT = ":service"  # outside TENANT_PATTERN, so no tenant's key can ever resolve to it
TENANT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# After the broker fails, count locally this long before trying it again, so an outage costs one timeout per
# interval rather than one per request.
REDIS_RETRY_S = 5.0


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(tenant: str, name: str | None = None) -> str:
    """Create a key for ``tenant`` and return it; it cannot be recovered later."""
    if not TENANT_PATTERN.fullmatch(tenant):
        raise ValueError(f"tenant {tenant!r} must be 1-64 letters, digits, '.', '_' or '-', starting alphanumeric")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with session_scope() as session:
        session.add(ApiKey(tenant=tenant, key_hash=_digest(key), name=name))
    return key


def tenant_for_key(key: str) -> str | None:
    service_key = get_settings().service_api_key
    if service_key is not None and hmac.compare_digest(_digest(key), _digest(service_key.get_secret_value())):
        return SERVICE_TENANT
    with session_scope() as session:
        row = session.scalars(select(ApiKey).where(ApiKey.key_hash == _digest(key), ApiKey.revoked.is_(False))).first()
        return row.tenant if row else None


class RateLimiter:
    """Fixed one-minute windows per tenant: in Redis when a broker is configured (shared by all API replicas),
    else in this process (the embedded default has one process).

    While Redis does not answer, each replica counts in its own process, with a warning. Not failing open: an
    outage must not lift every limit; not failing closed: reads and cancels need no broker and keep working.
    The limit then holds per replica (at worst limit times replicas in all), until Redis answers again.
    """

    def __init__(self) -> None:
        self._local: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._clients: dict[str, redis.Redis] = {}
        self._redis_down_until = 0.0

    def _count_in_redis(self, url: str, tenant: str, window: int) -> int | None:
        import redis

        if time.monotonic() < self._redis_down_until:
            return None
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        key = f"cuda-agent:rate:{tenant}:{window}"
        try:
            with client.pipeline() as pipe:
                count, _ = pipe.incr(key).expire(key, 120).execute()
        except redis.RedisError as exc:
            self._redis_down_until = time.monotonic() + REDIS_RETRY_S
            log.warning(
                "rate limiter: Redis does not answer; counting in this process for %.0f s: %s",
                REDIS_RETRY_S,
                type(exc).__name__,
            )
            return None
        return int(count)

    def _count_locally(self, tenant: str, window: int) -> int:
        with self._lock:
            self._local = {k: v for k, v in self._local.items() if k[1] >= window}
            count = self._local[(tenant, window)] = self._local.get((tenant, window), 0) + 1
        return count

    def hit(self, tenant: str, settings: Settings) -> int | None:
        """Count one request; return the seconds to wait when over the limit, else None."""
        window = int(time.time() // 60)
        count = self._count_in_redis(settings.redis_url, tenant, window) if settings.redis_url else None
        if count is None:
            count = self._count_locally(tenant, window)
        if count > settings.rate_limit_per_minute:
            return 60 - int(time.time()) % 60
        return None


rate_limiter = RateLimiter()


def require_tenant(
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> str:
    """The caller's tenant from `Authorization: Bearer <key>` or `X-API-Key`; 401 without a valid key, 429 over
    the rate limit."""
    settings = get_settings()
    if not settings.auth_required:
        return LOCAL_TENANT
    key = x_api_key
    if authorization and authorization.lower().startswith("bearer "):
        key = authorization[7:].strip()
    if not key:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing API key: send 'Authorization: Bearer <key>'")
    tenant = tenant_for_key(key)
    if tenant is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked API key")
    retry_after = rate_limiter.hit(tenant, settings)
    if retry_after is not None:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"rate limit of {settings.rate_limit_per_minute} requests per minute exceeded for tenant {tenant}",
            headers={"Retry-After": str(retry_after)},
        )
    return tenant


TenantDep = Annotated[str, Depends(require_tenant)]
