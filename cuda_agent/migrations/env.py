"""Alembic environment: the URL comes from cuda_agent settings, the metadata from cuda_agent.db.models."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from cuda_agent.db.models import Base
from cuda_agent.settings import get_settings

config = context.config
if not config.get_main_option("sqlalchemy.url"):
    settings = get_settings()
    if settings.database_url is None:  # embedded default: the SQLite file's folder may not exist yet
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    config.set_main_option("sqlalchemy.url", settings.sqlalchemy_url.replace("%", "%%"))

target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = engine_from_config(
        config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    with connectable.connect() as connection:
        # Batch mode lets the same migrations alter tables on SQLite (the embedded default).
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=True, compare_type=True
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
