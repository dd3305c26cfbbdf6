"""The API fixtures of tests/api (Postgres, auth on, two tenants' keys, in-process clients)."""

from tests.api.conftest import clients, tenants

__all__ = ["clients", "tenants"]
