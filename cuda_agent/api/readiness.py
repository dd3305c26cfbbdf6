"""Readiness checks shared by /readyz and `cuda-agent doctor`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from cuda_agent.db import check_database
from cuda_agent.logging import get_logger
from cuda_agent.settings import ConfigError, get_settings

log = get_logger(__name__)


def redact_url(url: str) -> str:
    """``url`` with its password replaced, for messages an operator reads."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=f"{netloc[0].split(':', 1)[0]}:***@{netloc[1]}"))


def check_broker() -> None:
    """Raise ConfigError with one line when the Redis broker does not answer (no-op on the embedded default)."""
    url = get_settings().redis_url
    if url is None:
        return
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except (redis.RedisError, ValueError) as exc:
        raise ConfigError(f"broker unreachable at {redact_url(url)}: {exc}") from exc


def _failure_class(exc: Exception) -> str:
    # The checks raise ConfigError over the driver's error (chained or, for the database, its context): the
    # driver's class says what failed without the URL, host or user that its message carries.
    cause = exc.__cause__ or exc.__context__
    return type(cause if isinstance(cause, Exception) else exc).__name__


def check_readiness() -> dict[str, dict[str, Any]]:
    """Per dependency: ok, else the class of the error. No URLs, hosts or messages: /readyz needs no key."""
    checks: dict[str, dict[str, Any]] = {}
    probes: tuple[tuple[str, Callable[[], None]], ...] = (("database", check_database), ("broker", check_broker))
    for name, check in probes:
        try:
            check()
            checks[name] = {"ok": True}
        except Exception as exc:  # readiness answers whatever the failure; the details go to the log only
            log.warning("readiness: %s not ready: %s", name, exc)
            checks[name] = {"ok": False, "error": _failure_class(exc)}
    return checks
