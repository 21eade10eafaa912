"""Bring schema ``mapsvc_auth`` to the newest revision (Alembic, run from code: no alembic.ini)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from shared.auth.schema import SCHEMA

__all__ = ["MIGRATIONS", "upgrade"]

#: the Alembic script directory (env.py, versions/)
MIGRATIONS = Path(__file__).resolve().parent / "migrations"

#: the key of the advisory lock that lets one process migrate at a time (any fixed bigint)
_LOCK_KEY = 0x6D61_7073_7661_7574  # "mapsvaut"


def upgrade(database_url: str) -> None:
    """Create schema ``mapsvc_auth`` if missing, then apply every pending revision.

    Idempotent, and safe when several processes call it at once: the work runs in one
    transaction that first takes a transaction-level advisory lock, so the others wait, then
    find nothing left to do. A failed revision leaves the schema as it was.

    Args:
        database_url: SQLAlchemy URL of the database (``postgresql+psycopg://…``).
    """
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{SCHEMA}"'))
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
    finally:
        engine.dispose()
