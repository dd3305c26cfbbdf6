"""Database access: typed models, sessions, migrations."""

from cuda_agent.db.session import check_database, get_engine, session_scope, upgrade_database

__all__ = ["check_database", "get_engine", "session_scope", "upgrade_database"]
