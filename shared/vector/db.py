"""The database engine of the API, and the lean pool that vector tiles are read through.

The engine (SQLAlchemy, pooled) has a statement timeout on every connection. A request that
finds no free connection within ``MAPSVC_DB_POOL_TIMEOUT_S`` gets
``sqlalchemy.exc.TimeoutError``, which the API answers with 503. A transaction left idle for
``MAPSVC_GEOJSON_MAX_S`` (the longest an answer may stream) is ended by PostgreSQL, a
backstop for the API's own cut, so no connection stays pinned by a client that stopped reading.

A vector tile is one statement, so it is read through a :class:`ReadPool` of its own made
with the engine (:func:`read_pool`): autocommit psycopg connections, one round trip a tile. The
engine's pool spends four more on each (a ping on checkout, ``BEGIN``, a ``SET LOCAL``,
``ROLLBACK`` on return) and SQLAlchemy's own work besides: measured, 1.5 ms of the API's CPU a
tile, three times what PostgreSQL spends making a small one. The read pool is closed with the
engine (``dispose``).

A statement of a caller's filter runs under a timeout of its own, shorter than the pool's
wait (``MAPSVC_FILTER_TIMEOUT_MS`` < ``MAPSVC_DB_POOL_TIMEOUT_S``): set for its transaction
alone (:func:`local_timeout`), so that callers' filters cannot hold every connection for
longer than another request waits for one.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy import event, make_url
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util.concurrency import await_, in_greenlet

from shared.errors import UnavailableError
from shared.settings import Settings

__all__ = [
    "ReadPool",
    "conninfo",
    "local_timeout",
    "make_engine",
    "pyformat",
    "read_pool",
    "under_timeout",
]

#: a bound parameter of SQLAlchemy's ``text()`` (its own pattern): ``:name``, not ``::type``
_BIND = re.compile(r"(?<![:\w\\]):(\w+)(?!:)")

_READ_POOLS: weakref.WeakKeyDictionary[Engine, ReadPool] = weakref.WeakKeyDictionary()


def conninfo(database_url: str) -> str:
    """A database URL (``MAPSVC_DATABASE_URL``'s form) as libpq's (psycopg's)."""
    url = make_url(database_url)
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def make_engine(settings: Settings, *, connections: int | None = None) -> AsyncEngine:
    """An async engine on ``MAPSVC_DATABASE_URL``; a query past the timeout is cancelled.

    Args:
        settings: the service's settings.
        connections: a pool of exactly this many connections (the readiness check has one of
            its own, so that a pool busy with answers does not make the service look down);
            default: ``MAPSVC_DB_POOL_SIZE`` plus ``MAPSVC_DB_MAX_OVERFLOW`` under load.
    """
    idle_ms = max(1, int(settings.vector.geojson_max_s * 1000))
    timeout = f"-c statement_timeout={settings.vector.statement_timeout_ms}"
    engine = create_async_engine(
        settings.database_url,
        pool_pre_ping=True,
        pool_size=connections or settings.db_pool_size,
        max_overflow=0 if connections else settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout_s,
        connect_args={
            "connect_timeout": 3,
            # prepared on first use, so that a statement is planned once per connection
            "prepare_threshold": 0,
            "options": f"{timeout} -c idle_in_transaction_session_timeout={idle_ms}",
        },
    )
    pool = ReadPool(
        conninfo(settings.database_url),
        size=connections or settings.db_pool_size + settings.db_max_overflow,
        wait_s=settings.db_pool_timeout_s,
        # Planning a tile query with its values costs more than running it (PostGIS
        # estimates the tile's selectivity each time): a generic plan, prepared once per
        # connection, serves every tile. Measured: 52 -> 13 ms a tile of 500,000 points.
        options=f"{timeout} -c plan_cache_mode=force_generic_plan",
    )
    _READ_POOLS[engine.sync_engine] = pool
    event.listen(engine.sync_engine, "engine_disposed", _close_read_pool)
    return engine


def _close_read_pool(engine: Engine) -> None:
    pool = _READ_POOLS.get(engine)
    if pool is not None and in_greenlet():  # AsyncEngine.dispose runs its work in a greenlet
        await_(pool.close())


def pyformat(sql: str) -> str:
    """SQL with ``:name`` parameters (as ``sqlalchemy.text`` takes it) in psycopg's style."""
    return _BIND.sub(r"%(\1)s", sql.replace("%", "%%")).replace("\\:", ":")


def local_timeout(timeout_ms: int) -> str:
    """The statement that sets the statement timeout of the transaction it runs in."""
    return f"SET LOCAL statement_timeout = {int(timeout_ms)}"


@asynccontextmanager
async def under_timeout(
    conn: psycopg.AsyncConnection[Any], timeout_ms: int | None
) -> AsyncIterator[None]:
    """Statements run inside under ``timeout_ms``, in a transaction of theirs; under the
    connection's own timeout when it is None (no transaction)."""
    if timeout_ms is None:
        yield
        return
    async with conn.transaction():
        await conn.execute(local_timeout(timeout_ms))
        yield


def read_pool(engine: AsyncEngine) -> ReadPool:
    """The read pool made with ``engine`` (one with default settings if another made it)."""
    pool = _READ_POOLS.get(engine.sync_engine)
    if pool is None:
        url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        pool = _READ_POOLS[engine.sync_engine] = ReadPool(url, size=5, wait_s=3.0, options="")
    return pool


class ReadPool:
    """Autocommit psycopg connections for single statements (psycopg's own pool), up to
    ``size`` at a time, opened as they are needed.

    No ping on checkout: a read on an idle connection that the server dropped is run once more
    on another (:meth:`value`); the pool discards a broken connection, and one given back
    mid-statement (a cancelled request). Statements are prepared on first use.
    """

    def __init__(self, conninfo: str, *, size: int, wait_s: float, options: str) -> None:
        self._kwargs: dict[str, Any] = {
            "conninfo": conninfo,
            "min_size": 0,
            "max_size": size,
            "timeout": wait_s,
            "kwargs": {
                "autocommit": True,
                "prepare_threshold": 0,
                "connect_timeout": 3,
                "options": options,
            },
        }
        self._pool: AsyncConnectionPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _opened(self) -> AsyncConnectionPool:
        """The pool, opened on first use in this loop (the loop of a test's app may end)."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._loop is not loop:
            self._pool = AsyncConnectionPool(**self._kwargs, open=False)
            await self._pool.open()
            self._loop = loop
        return self._pool

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection of the pool.

        Raises:
            UnavailableError: no connection came free within ``wait_s``.
        """
        pool = await self._opened()
        try:
            async with pool.connection() as conn:
                yield conn
        except PoolTimeout:
            # PostgreSQL busy, or down (the pool's connection attempts fail until the wait ends)
            raise UnavailableError(
                "PostgreSQL is busy or unreachable: no database connection came free; try again",
                service="PostgreSQL",
                retry_after_s=1,
            ) from None

    async def value(self, sql: str, params: dict[str, Any], timeout_ms: int | None = None) -> Any:
        """The first column of the first row of a statement (None without rows), under
        ``timeout_ms`` (None: the connection's statement timeout).

        Raises:
            psycopg.Error: the statement failed.
            UnavailableError: no connection came free in time.
        """
        for attempt in (1, 2):
            async with self.connection() as conn:
                try:
                    async with under_timeout(conn, timeout_ms):
                        row = await (await conn.execute(sql, params)).fetchone()
                except psycopg.OperationalError:
                    if attempt == 2 or not conn.broken:
                        raise
                    continue  # the server dropped an idle connection: once more, on another
                return None if row is None else row[0]
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close the pool's connections."""
        if self._pool is not None:
            await self._pool.close()
