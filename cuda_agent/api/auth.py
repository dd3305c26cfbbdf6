"""API keys, tenants and per-tenant rate limits.

Keys are random 256-bit tokens shown once at creation; only their SHA-256 is stored. Every /v1 route resolves
the caller's tenant through ``require_tenant``; jobs and trajectories are filtered by it.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from typing import Annotated

from fastapi import Depends, Header, HTTPException, status
from sqlalchemy import select

from cuda_agent.db import session_scope
from cuda_agent.db.models import ApiKey
from cuda_agent.settings import Settings, get_settings

KEY_PREFIX = "ca_"
LOCAL_TENANT = "local"  # the tenant of every request when auth_required is off


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(tenant: str, name: str | None = None) -> str:
    """Create a key for ``tenant`` and return it; it cannot be recovered later."""
    if not tenant or len(tenant) > 64:
        raise ValueError("tenant must be 1-64 characters")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with session_scope() as session:
        session.add(ApiKey(tenant=tenant, key_hash=_digest(key), name=name))
    return key


def tenant_for_key(key: str) -> str | None:
    with session_scope() as session:
        row = session.scalars(select(ApiKey).where(ApiKey.key_hash == _digest(key), ApiKey.revoked.is_(False))).first()
        return row.tenant if row else None


class RateLimiter:
    """Fixed one-minute windows per tenant: in Redis when a broker is configured (shared by all API replicas),
    else in this process (the embedded default has one process)."""

    def __init__(self) -> None:
        self._local: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def hit(self, tenant: str, settings: Settings) -> int | None:
        """Count one request; return the seconds to wait when over the limit, else None."""
        window = int(time.time() // 60)
        if settings.redis_url:
            import redis

            client = redis.Redis.from_url(settings.redis_url, socket_timeout=2)
            key = f"cuda-agent:rate:{tenant}:{window}"
            with client.pipeline() as pipe:
                count, _ = pipe.incr(key).expire(key, 120).execute()
        else:
            with self._lock:
                self._local = {k: v for k, v in self._local.items() if k[1] >= window}
                count = self._local[(tenant, window)] = self._local.get((tenant, window), 0) + 1
        if int(count) > settings.rate_limit_per_minute:
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
