"""The one settings object. Every service, worker and the CLI read configuration through ``get_settings()``.

Environment variables carry the ``CUDA_AGENT_`` prefix, except the conventional ``DATABASE_URL`` and
``REDIS_URL``. With neither set, the platform runs embedded: a SQLite file and in-process task execution.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_SECRET = "change-me"


class ConfigError(RuntimeError):
    """Configuration that cannot work; its message is one line meant for the operator."""


class LLMEndpoint(BaseModel):
    """An OpenAI-compatible endpoint the operator configured; requests name it, never see its URL or key."""

    base_url: str | None = Field(None, description="Server URL; None: the OpenAI SDK's default (api.openai.com).")
    model: str | None = Field(None, description="The model a request gets when it names none.")
    models: list[str] = Field(default_factory=list, description="Other model names a request may choose.")
    api_key: SecretStr = Field(SecretStr("EMPTY"), description="Sent only to base_url.")

    def allows(self, model: str) -> bool:
        return model == self.model or model in self.models


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

    # Queue behaviour. A job's lease (renewed by a heartbeat while it runs) says whether its attempt is alive; the
    # sweeper in every worker re-dispatches jobs whose lease expired or whose message was lost (jobs.recovery).
    task_time_limit_s: int = Field(3600, description="Hard time limit of any Celery task, in seconds.")
    visibility_timeout_s: int = Field(
        300,
        gt=0,
        description="Redis visibility timeout: how long a dead worker's unacknowledged message waits before Redis "
        "hands it out again. May be shorter than a task: a running job's redelivered message is ignored (its lease "
        "is live), and a dead worker's job is recovered by the lease sweeper, not by this timeout.",
    )
    job_lease_s: float = Field(
        30.0,
        gt=0,
        description="How long a running job's lease lasts without a heartbeat before another worker may take the "
        "job over (its worker is then presumed dead).",
    )
    job_heartbeat_s: float = Field(10.0, gt=0, description="How often a running job renews its lease.")
    job_sweep_interval_s: float = Field(
        15.0, gt=0, description="How often each worker looks for jobs to recover (one worker acts at a time)."
    )
    job_requeue_after_s: float = Field(
        120.0,
        gt=0,
        description="A queued job whose message is this old and not waiting in its queue (broker restarted without "
        "its data, message dropped) is sent again.",
    )

    # Toolchain. Taken from CUDA_HOME like every CUDA tool; torch would otherwise guess /usr/local from an nvcc
    # wrapper script, and builds fail.
    cuda_home: Path = Field(
        Path("/usr/local/cuda"),
        validation_alias=AliasChoices("CUDA_HOME", "CUDA_PATH", "CUDA_AGENT_CUDA_HOME"),
        description="CUDA toolkit root (nvcc, headers, ncu, vendor libraries).",
    )

    # Compilation.
    compile_timeout_s: float = Field(300.0, description="Wall-clock limit of one sandboxed build.")
    compile_cpu_time_s: int = Field(600, description="RLIMIT_CPU of one sandboxed build.")
    compile_memory_bytes: int = Field(8 * 1024**3, description="RLIMIT_AS of one sandboxed build.")
    compile_max_processes: int = Field(256, description="RLIMIT_NPROC of one sandboxed build.")
    compile_max_file_bytes: int = Field(512 * 1024**2, description="RLIMIT_FSIZE of one sandboxed build.")
    compile_disk_bytes: int = Field(
        4 * 1024**3, gt=0, description="Disk quota of one sandboxed build: all files it writes, together."
    )
    compile_memory_quota_bytes: int = Field(
        8 * 1024**3, gt=0, description="Resident memory quota of one sandboxed build (its processes and its /tmp)."
    )
    compile_cache_max_bytes: int = Field(
        20 * 1024**3,
        gt=0,
        description="Byte budget of the compile caches together (artifacts, cached objects, precompiled headers); "
        "past it, each build evicts the least recently used entries.",
    )
    cuda_arch: str | None = Field(
        None, description="Target arch, e.g. sm_90a. Unset: detected from the GPU, else sm_90a."
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
    eval_disk_bytes: int = Field(
        2 * 1024**3, gt=0, description="Disk quota of one evaluation child: all files it writes, together."
    )
    eval_memory_quota_bytes: int = Field(
        32 * 1024**3, gt=0, description="Resident host memory quota of one evaluation child (GPU memory apart)."
    )
    reward_speedup_threshold: float = Field(1.05, description="Speedup over a baseline that counts as faster.")
    gpu_index: int | None = Field(None, description="NVML index this worker is pinned to (GPU workers).")

    # The agent's bash tool (its time limit is the rollout's bash_timeout_s): quotas of one call over the whole
    # workspace and all its processes (tmpfs included).
    agent_bash_disk_bytes: int = Field(2 * 1024**3, gt=0, description="Disk quota of one bash tool call.")
    agent_bash_memory_bytes: int = Field(8 * 1024**3, gt=0, description="Memory quota of one bash tool call.")

    # API access.
    auth_required: bool = Field(
        True, description="Every route but health needs an API key. Off only for a local single-user setup."
    )
    service_api_key: SecretStr | None = Field(
        None, description="Key that workers send to other services (e.g. to fetch artifacts from compile_svc)."
    )
    rate_limit_per_minute: int = Field(120, description="Requests per tenant per minute before 429.")
    max_concurrent_jobs: int = Field(4, description="Queued or running optimize jobs per tenant before 429.")
    max_request_bytes: int = Field(
        16 * 1024**2, gt=0, description="Largest request body any service accepts (413 beyond)."
    )

    # Agent.
    agent_max_turns: int = Field(150, description="Turn limit of one rollout.")
    agent_context_tokens: int = Field(128_000, description="Context budget of one rollout.")
    openai_base_url: str | None = Field(None, description="OpenAI-compatible endpoint of the `openai` policy.")
    openai_api_key: SecretStr = Field(SecretStr("EMPTY"), description="API key of that endpoint.")
    openai_model: str | None = Field(None, description="Model name served by that endpoint.")
    llm_endpoints: dict[str, LLMEndpoint] = Field(
        default_factory=dict,
        description="More endpoints by name, as JSON: {name: {base_url, model, models, api_key}}. The CUDA_AGENT_"
        "OPENAI_* settings are the one named 'default' (unless this names one). Requests choose among these.",
    )

    def llm_endpoint(self, name: str) -> LLMEndpoint:
        """The endpoint configured under ``name``; ConfigError naming the configured ones when there is none."""
        if name in self.llm_endpoints:
            return self.llm_endpoints[name]
        if name == "default":
            return LLMEndpoint(base_url=self.openai_base_url, model=self.openai_model, api_key=self.openai_api_key)
        names = ", ".join(sorted({"default", *self.llm_endpoints}))
        raise ConfigError(f"no LLM endpoint named {name!r}; configured: {names}")

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
        # No "visibility timeout > task time limit" rule: a running job's lease, not the broker, decides whether a
        # redelivered message runs again (a live attempt's duplicate is ignored), so the timeout can stay short.
        if self.job_heartbeat_s * 2 > self.job_lease_s:
            raise ValueError("CUDA_AGENT_JOB_LEASE_S must be at least twice CUDA_AGENT_JOB_HEARTBEAT_S")
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
