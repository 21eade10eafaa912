"""The database engine of the API: pooled, with a statement timeout on every connection.

A request that finds no free connection within ``MAPSVC_DB_POOL_TIMEOUT_S`` gets
``sqlalchemy.exc.TimeoutError``, which the API answers with 503. A transaction left idle for
``MAPSVC_GEOJSON_MAX_S`` (the longest an answer may stream) is ended by PostgreSQL, a
backstop for the API's own cut, so no connection stays pinned by a client that stopped reading.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from shared.settings import Settings

__all__ = ["make_engine"]


def make_engine(settings: Settings, *, connections: int | None = None) -> AsyncEngine:
    """An async engine on ``MAPSVC_DATABASE_URL``; a query past the timeout is cancelled.

    Args:
        settings: the service's settings.
        connections: a pool of exactly this many connections (the readiness check has one of
            its own, so that a pool busy with answers does not make the service look down);
            default: ``MAPSVC_DB_POOL_SIZE`` plus ``MAPSVC_DB_MAX_OVERFLOW`` under load.
    """
    idle_ms = max(1, int(settings.vector.geojson_max_s * 1000))
    return create_async_engine(
        settings.database_url,
        pool_pre_ping=True,
        pool_size=connections or settings.db_pool_size,
        max_overflow=0 if connections else settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout_s,
        connect_args={
            "connect_timeout": 3,
            # prepared on first use, so that the plan of a tile query is made once per
            # connection (see shared.vector.tiles)
            "prepare_threshold": 0,
            "options": f"-c statement_timeout={settings.vector.vector_statement_timeout_ms}"
            f" -c idle_in_transaction_session_timeout={idle_ms}",
        },
    )
