"""The database engine of the API: pooled, with a statement timeout on every connection."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from shared.settings import Settings

__all__ = ["make_engine"]


def make_engine(settings: Settings) -> AsyncEngine:
    """An async engine on ``MAPSVC_DATABASE_URL``; a query past the timeout is cancelled."""
    return create_async_engine(
        settings.database_url,
        pool_pre_ping=True,
        pool_size=5,
        max_overflow=5,
        connect_args={
            "connect_timeout": 3,
            # prepared on first use, so that the plan of a tile query is made once per
            # connection (see shared.vector.tiles)
            "prepare_threshold": 0,
            "options": f"-c statement_timeout={settings.vector_statement_timeout_ms}",
        },
    )
