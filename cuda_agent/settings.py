"""The one settings object. Every service, worker and the CLI read configuration through ``get_settings()``.

Environment variables carry the ``CUDA_AGENT_`` prefix, except the conventional ``DATABASE_URL`` and
``REDIS_URL``. With neither set, the platform runs embedded: a SQLite file and in-process task execution.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_SECRET = "change-me"


class ConfigError(RuntimeError):
    """Configuration that cannot work; its message is one line meant for the operator."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CUDA_AGENT_", extra="ignore", populate_by_name=True)

    environment: Literal["development", "test", "production"] = Field(
        "development", description="Deployment stage; outside development a real secret key is required."
    )
    secret_key: SecretStr = Field(
        SecretStr(PLACEHOLDER_SECRET), description="Signs API keys and internal tokens. Must be set in production."
    )
    data_dir: Path = Field(
        Path.home() / ".cuda-agent", description="Root for the SQLite file, artifacts, workspaces and caches."
    )
    database_url: str | None = Field(
        None,
        validation_alias=AliasChoices("DATABASE_URL", "CUDA_AGENT_DATABASE_URL"),
        description="SQLAlchemy URL. Unset: embedded SQLite under data_dir.",
    )
    redis_url: str | None = Field(
        None,
        validation_alias=AliasChoices("REDIS_URL", "CUDA_AGENT_REDIS_URL"),
        description="Celery broker URL. Unset: tasks run in-process (embedded mode).",
    )
    log_level: str = Field("INFO", description="Root log level.")
    log_json: bool = Field(False, description="Emit JSON log lines (services in containers) instead of text.")

    # Queue behaviour. The visibility timeout must exceed the longest task, otherwise Redis redelivers a
    # task that is still running and it executes twice.
    task_time_limit_s: int = Field(3600, description="Hard time limit of any Celery task, in seconds.")
    visibility_timeout_s: int = Field(7200, description="Redis visibility timeout; longer than the longest task.")

    # Compilation.
    compile_timeout_s: float = Field(300.0, description="Wall-clock limit of one sandboxed build.")
    compile_cpu_time_s: int = Field(600, description="RLIMIT_CPU of one sandboxed build.")
    compile_memory_bytes: int = Field(8 * 1024**3, description="RLIMIT_AS of one sandboxed build.")
    compile_max_processes: int = Field(256, description="RLIMIT_NPROC of one sandboxed build.")
    compile_max_file_bytes: int = Field(512 * 1024**2, description="RLIMIT_FSIZE of one sandboxed build.")
    cuda_arch: str | None = Field(
        None, description="Target arch, e.g. sm_90a. Unset: detected from the GPU, else sm_90."
    )
    compile_service_url: str | None = Field(
        None, description="Base URL of compile_svc, used by GPU workers on other hosts to fetch artifacts."
    )

    # Evaluation.
    eval_timeout_s: float = Field(600.0, description="Wall-clock limit of one candidate evaluation process.")
    eval_gpu_memory_fraction: float = Field(
        0.9, description="Per-process CUDA memory cap (RLIMIT_AS cannot bound GPU processes)."
    )
    eval_warm_children: int = Field(
        2, ge=0, description="Evaluation child processes kept started ahead of work (0: start each on demand)."
    )
    reward_speedup_threshold: float = Field(1.05, description="Speedup over a baseline that counts as faster.")
    gpu_index: int | None = Field(None, description="NVML index this worker is pinned to (GPU workers).")

    # API access.
    auth_required: bool = Field(
        True, description="Every route but health needs an API key. Off only for a local single-user setup."
    )
    service_api_key: SecretStr | None = Field(
        None, description="Key that workers send to other services (e.g. to fetch artifacts from compile_svc)."
    )
    rate_limit_per_minute: int = Field(120, description="Requests per tenant per minute before 429.")
    max_concurrent_jobs: int = Field(4, description="Queued or running optimize jobs per tenant before 429.")

    # Agent.
    agent_max_turns: int = Field(150, description="Turn limit of one rollout.")
    agent_context_tokens: int = Field(128_000, description="Context budget of one rollout.")
    openai_base_url: str | None = Field(None, description="OpenAI-compatible endpoint of the `openai` policy.")
    openai_api_key: SecretStr = Field(SecretStr("EMPTY"), description="API key of that endpoint.")
    openai_model: str | None = Field(None, description="Model name served by that endpoint.")

    @field_validator("database_url")
    @classmethod
    def _driver_scheme(cls, url: str | None) -> str | None:
        # Hosted Postgres hands out postgres:// URLs; SQLAlchemy needs the driver named.
        if url and url.startswith(("postgres://", "postgresql://")):
            return "postgresql+psycopg://" + url.split("://", 1)[1]
        return url

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.environment == "production" and self.secret_key.get_secret_value() == PLACEHOLDER_SECRET:
            raise ValueError("CUDA_AGENT_SECRET_KEY must be set to a real secret outside development")
        if self.visibility_timeout_s <= self.task_time_limit_s:
            raise ValueError("CUDA_AGENT_VISIBILITY_TIMEOUT_S must exceed CUDA_AGENT_TASK_TIME_LIMIT_S")
        return self

    @property
    def embedded(self) -> bool:
        """True when no broker is configured: tasks run in this process."""
        return self.redis_url is None

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'cuda-agent.db'}"

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def workspaces_dir(self) -> Path:
        return self.data_dir / "workspaces"


@functools.cache
def get_settings() -> Settings:
    """Settings from the environment, read once. Bad values raise ``ConfigError`` with one line."""
    try:
        return Settings()
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        errors = getattr(exc, "errors", None)
        if callable(errors):
            first = errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "settings"
            raise ConfigError(f"invalid configuration: {where}: {first['msg']}") from None
        raise ConfigError(f"invalid configuration: {exc}") from None
