"""Annotated dependency aliases keep route signatures to one line."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header

from cuda_agent.settings import Settings, get_settings

SettingsDep = Annotated[Settings, Depends(get_settings)]
IdempotencyKeyDep = Annotated[str | None, Header(alias="Idempotency-Key", max_length=128)]
