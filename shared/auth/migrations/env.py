"""Alembic's environment: migrate over the connection `shared.auth.migrate.upgrade` passes.

No ``alembic.ini``: the connection comes in ``config.attributes["connection"]``, already in a
transaction that holds the migration lock. The version table lives in ``mapsvc_auth`` too.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from shared.auth.schema import SCHEMA, metadata


def run_migrations_online() -> None:
    """Run the pending revisions over the given connection."""
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError("run the auth migrations with shared.auth.migrate.upgrade")
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table_schema=SCHEMA,
        include_schemas=True,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("the auth migrations run online only (shared.auth.migrate.upgrade)")
run_migrations_online()
