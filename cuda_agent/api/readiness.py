"""Readiness checks shared by /readyz and `cuda-agent doctor`."""

from __future__ import annotations

from typing import Any

from cuda_agent.db import check_database
from cuda_agent.settings import ConfigError, get_settings


def check_broker() -> None:
    """Raise ConfigError with one line when the Redis broker does not answer (no-op on the embedded default)."""
    url = get_settings().redis_url
    if url is None:
        return
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except (redis.RedisError, ValueError) as exc:
        raise ConfigError(f"broker unreachable at {url}: {exc}") from None


def check_readiness() -> dict[str, dict[str, Any]]:
    checks: dict[str, dict[str, Any]] = {}
    for name, check in (("database", check_database), ("broker", check_broker)):
        try:
            check()
            checks[name] = {"ok": True}
        except ConfigError as exc:
            checks[name] = {"ok": False, "error": str(exc)}
    return checks
