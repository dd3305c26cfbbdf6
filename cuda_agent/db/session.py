"""Engine and sessions. One engine per process and URL; sessions are short and scoped with ``session_scope``."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from cuda_agent.settings import ConfigError, get_settings

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine_for(url: str) -> Engine:
    """One engine per process and URL."""
    with _ENGINES_LOCK:
        if url not in _ENGINES:
            _ENGINES[url] = _create_engine(url)
        return _ENGINES[url]


def _create_engine(url: str) -> Engine:
    try:
        if url.startswith("sqlite"):
            engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
            # Foreign keys are off by default in SQLite; WAL lets the API read while a job writes.
            event.listen(engine, "connect", _sqlite_pragmas)
            return engine
        # A bounded connect: an unreachable database fails a job step (which retries) instead of hanging a
        # worker's event loop, where the job sweep runs.
        return create_engine(
            url, pool_pre_ping=True, pool_size=5, max_overflow=10, connect_args={"connect_timeout": 10}
        )
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(f"invalid database URL {url!r}: {exc}") from None


def _forget_inherited_connections() -> None:
    # A forked child (a Celery pool process) must not use the connections its parent opened: two processes on one
    # socket corrupt both sessions. close=False leaves them to the parent (psycopg does not close them at garbage
    # collection in another process) and the child opens its own. SQLAlchemy docs: "Using Connection Pools with
    # Multiprocessing or os.fork()".
    for engine in _ENGINES.values():
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_inherited_connections)


def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def get_engine() -> Engine:
    settings = get_settings()
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    return _engine_for(settings.sqlalchemy_url)


@functools.cache
def _factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope() -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    session = _factory(get_engine())()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def check_database() -> None:
    """Raise ConfigError with one line when the database cannot be reached."""
    engine = get_engine()
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise ConfigError(
            f"database unreachable at {engine.url.render_as_string(hide_password=True)}: {reason}"
        ) from None


def upgrade_database(revision: str = "head") -> None:
    """Apply Alembic migrations (the only way tables are created)."""
    from alembic import command

    get_engine()  # creates the embedded SQLite file's folder
    command.upgrade(alembic_config(), revision)


def alembic_config() -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", get_settings().sqlalchemy_url.replace("%", "%%"))
    return cfg
