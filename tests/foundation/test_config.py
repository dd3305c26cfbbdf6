"""Bad configuration fails at start with one clear line, not a traceback."""

from __future__ import annotations

import pytest

from cuda_agent.settings import ConfigError, Settings, get_settings
from tests.conftest import cli


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}, "database unreachable at"),
        ({"DATABASE_URL": "notadb://x"}, "invalid database URL"),
        ({"CUDA_AGENT_ENVIRONMENT": "production"}, "CUDA_AGENT_SECRET_KEY must be set"),
        ({"CUDA_AGENT_JOB_LEASE_S": "5", "CUDA_AGENT_JOB_HEARTBEAT_S": "4"}, "at least twice"),
        ({"CUDA_AGENT_COMPILE_TIMEOUT_S": "soon"}, "compile_timeout_s"),
    ],
)
def test_bad_configuration_fails_with_one_line(env: dict[str, str], expected: str) -> None:
    result = cli("serve", "compile", "--port", "1", env=env, timeout=60)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_worker_refuses_unreachable_broker() -> None:
    result = cli("worker", "compile", env={"REDIS_URL": "redis://127.0.0.1:1/0"}, timeout=60)
    assert result.returncode == 2
    assert "broker unreachable at redis://127.0.0.1:1/0" in result.stderr
    assert "Traceback" not in result.stderr


def test_postgres_urls_get_the_driver_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://u:p@db:5432/app")
    assert Settings().sqlalchemy_url == "postgresql+psycopg://u:p@db:5432/app"


def test_embedded_default_without_urls() -> None:
    settings = get_settings()
    assert settings.embedded
    assert settings.sqlalchemy_url.startswith("sqlite:///") and str(settings.data_dir) in settings.sqlalchemy_url


def test_production_accepts_a_real_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_AGENT_ENVIRONMENT", "production")
    monkeypatch.setenv("CUDA_AGENT_SECRET_KEY", "s3cr3t-" * 4)
    assert get_settings().environment == "production"
    monkeypatch.delenv("CUDA_AGENT_SECRET_KEY")
    get_settings.cache_clear()
    with pytest.raises(ConfigError):
        get_settings()
