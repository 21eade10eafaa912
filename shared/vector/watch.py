"""Watched vector layers (issue 35): PostgreSQL records where each change of a table happened.

Watching a table installs four statement-level triggers on it (``INSERT``, ``UPDATE``,
``DELETE`` with transition tables, and ``TRUNCATE``). Each statement, however many rows it
touches, writes one row to the change log :data:`LOG` — the boxes (EPSG:4326) of its rows' old
and new geometries, rows grouped by cells of :data:`CELL_DEG` degrees, at most
:data:`MAX_BOXES` boxes (cells grown four times until they fit); ``TRUNCATE`` writes no box: the
whole layer — and ``NOTIFY`` :data:`CHANNEL`, which only wakes the follower
(:mod:`shared.seeding.follow`): the log, with its ordered ``id``, is what it reads, so a change
made while it was away is still there when it comes back.

The trigger function is ``SECURITY DEFINER``: whoever writes the table needs no right on the
log. Installing the triggers needs the right to make triggers on the table (its owner's, or
``TRIGGER``): a role without it gets a clear refusal, and ``mapsvc watch`` can be run as the
owner (``--database-url``). Views cannot be watched (their tables can).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import redis
from psycopg import sql

from shared.errors import ForbiddenError, NotFoundError, UnprocessableError
from shared.vector.cache import WATCHED_KEY
from shared.vector.catalog import VectorLayer

__all__ = [
    "CHANNEL",
    "CELL_DEG",
    "LOG",
    "MAX_BOXES",
    "Change",
    "Watched",
    "changes_after",
    "install",
    "installed",
    "newest_change",
    "prune",
    "start_watching",
    "stop_watching",
    "unwatch",
    "watch",
    "watched",
    "watched_layers",
]

#: the schema of the log and the function, the channel that wakes the follower
SCHEMA = CHANNEL = "mapsvc_watch"
LOG = f"{SCHEMA}.changes"
#: the side of the cells a statement's rows are grouped by (about a tile of zoom 12)
CELL_DEG = 0.05
#: the most boxes one statement records
MAX_BOXES = 256
_EVENTS = {
    "ins": "INSERT ON {t} REFERENCING NEW TABLE AS new_rows",
    "upd": "UPDATE ON {t} REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
    "del": "DELETE ON {t} REFERENCING OLD TABLE AS old_rows",
    "trunc": "TRUNCATE ON {t}",
}

_INSTALL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {LOG} (
    id bigserial PRIMARY KEY,
    layer text NOT NULL,
    op text NOT NULL,
    boxes geometry,
    rows bigint,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.watched (
    layer text PRIMARY KEY,
    geometry_column text NOT NULL,
    since timestamptz NOT NULL DEFAULT now()
);
CREATE OR REPLACE FUNCTION {SCHEMA}.record() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $f$
DECLARE
    layer text := TG_ARGV[0];
    geom text := TG_ARGV[1];
    cell float8 := TG_ARGV[2]::float8;
    most int := TG_ARGV[3]::int;
    source text;
    boxes geometry[];
    counted bigint;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        INSERT INTO {LOG} (layer, op) VALUES (layer, TG_OP);
        PERFORM pg_notify('{CHANNEL}', layer);
        RETURN NULL;
    END IF;
    source := CASE TG_OP
        WHEN 'INSERT' THEN format('SELECT %I AS g FROM new_rows', geom)
        WHEN 'DELETE' THEN format('SELECT %I AS g FROM old_rows', geom)
        ELSE format('SELECT %1$I AS g FROM old_rows UNION ALL SELECT %1$I FROM new_rows', geom)
    END;
    EXECUTE format($q$
        SELECT array_agg(box), sum(n)::bigint FROM (
            SELECT ST_SetSRID(ST_Extent(g)::geometry, 4326) AS box, count(*) AS n
            FROM (
                SELECT ST_Transform(g, 4326) AS g FROM (%s) r
                WHERE g IS NOT NULL AND NOT ST_IsEmpty(g)
            ) t
            GROUP BY floor(ST_XMin(g) / $1), floor(ST_YMin(g) / $1)
        ) cells $q$, source) INTO boxes, counted USING cell;
    IF counted IS NULL THEN  -- no row, or none with a geometry
        RETURN NULL;
    END IF;
    WHILE cardinality(boxes) > most LOOP
        cell := cell * 4;
        SELECT array_agg(box) INTO boxes FROM (
            SELECT ST_SetSRID(ST_Extent(b)::geometry, 4326) AS box FROM unnest(boxes) AS b
            GROUP BY floor(ST_XMin(b) / cell), floor(ST_YMin(b) / cell)
        ) grown;
    END LOOP;
    INSERT INTO {LOG} (layer, op, boxes, rows)
    VALUES (layer, TG_OP, ST_Collect(boxes), counted);
    PERFORM pg_notify('{CHANNEL}', layer);
    RETURN NULL;
END $f$;
"""


@dataclass(frozen=True)
class Change:
    """One statement's change of a watched layer.

    Attributes:
        id: its place in the log.
        layer: the layer's id (``schema.table``).
        op: ``INSERT``, ``UPDATE``, ``DELETE`` or ``TRUNCATE``.
        boxes: where its rows were and are, ``[west, south, east, north]`` in degrees; None:
            everywhere (a ``TRUNCATE``).
        rows: the rows it touched (None for a ``TRUNCATE``).
    """

    id: int
    layer: str
    op: str
    boxes: list[list[float]] | None
    rows: int | None


@dataclass(frozen=True)
class Watched:
    """A watched layer: its id, geometry column, and since when."""

    layer: str
    geometry_column: str
    since: datetime

    def to_json(self) -> dict[str, Any]:
        """As JSON: ``layer``, ``geometry_column``, ``since`` (ISO 8601)."""
        return {
            "layer": self.layer,
            "geometry_column": self.geometry_column,
            "since": self.since.isoformat(),
        }


def install(conn: psycopg.Connection[Any]) -> None:
    """Make the log, the list of watched layers and the trigger function (again: idempotent)."""
    with conn.transaction():
        conn.execute(f"SELECT pg_advisory_xact_lock(hashtext('{SCHEMA}'))")
        conn.execute(_INSTALL)


def _triggers(layer: VectorLayer) -> list[sql.Composed]:
    """The statements that make (or replace) the layer's four triggers (PostgreSQL 14+)."""
    table = sql.Identifier(layer.schema, layer.table)
    args = sql.SQL(", ").join(
        sql.Literal(str(v)) for v in (layer.id, layer.geometry_column, CELL_DEG, MAX_BOXES)
    )
    return [
        sql.SQL(
            "CREATE OR REPLACE TRIGGER {n} AFTER " + event + " FOR EACH STATEMENT"
            " EXECUTE FUNCTION " + SCHEMA + ".record({a})"
        ).format(n=sql.Identifier(f"mapsvc_watch_{suffix}"), t=table, a=args)
        for suffix, event in _EVENTS.items()
    ]


def watch(conn: psycopg.Connection[Any], layer: VectorLayer) -> Watched:
    """Watch ``layer``'s table: its triggers made (again), and the layer listed.

    Raises:
        UnprocessableError: the layer is a view.
        ForbiddenError: the database role may not make triggers on the table.
    """
    if layer.is_view:
        raise UnprocessableError(
            f"{layer.id} is a view: watch the tables it reads (a view has no triggers)",
            layer=layer.id,
        )
    try:
        install(conn)
        with conn.transaction():
            for statement in _triggers(layer):
                conn.execute(statement)
            row = conn.execute(
                f"INSERT INTO {SCHEMA}.watched (layer, geometry_column) VALUES (%s, %s)"
                " ON CONFLICT (layer) DO UPDATE SET geometry_column = excluded.geometry_column"
                " RETURNING layer, geometry_column, since",
                (layer.id, layer.geometry_column),
            ).fetchone()
    except psycopg.errors.InsufficientPrivilege as exc:
        raise _refused(conn, layer.id) from exc
    assert row is not None
    return Watched(*row)


def unwatch(conn: psycopg.Connection[Any], layer: VectorLayer) -> None:
    """Stop watching ``layer``: its triggers removed, and its entry (its pending changes are
    still read by the follower).

    Raises:
        NotFoundError: it is not watched.
        ForbiddenError: the database role may not remove triggers of the table.
    """
    if not installed(conn):
        raise NotFoundError(f"{layer.id} is not watched", layer=layer.id)
    table = sql.Identifier(layer.schema, layer.table)
    try:
        with conn.transaction():
            gone = conn.execute(
                f"DELETE FROM {SCHEMA}.watched WHERE layer = %s", (layer.id,)
            ).rowcount
            if not gone:
                raise NotFoundError(f"{layer.id} is not watched", layer=layer.id)
            for suffix in _EVENTS:
                name = sql.Identifier(f"mapsvc_watch_{suffix}")
                conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {n} ON {t}").format(n=name, t=table))
    except psycopg.errors.InsufficientPrivilege as exc:
        raise _refused(conn, layer.id) from exc


def _refused(conn: psycopg.Connection[Any], layer_id: str) -> ForbiddenError:
    role = conn.execute("SELECT current_user").fetchone()
    return ForbiddenError(
        f"the database role {role[0] if role else '?'} may not make triggers on {layer_id}"
        f" (or the schema {SCHEMA} of their log): run `mapsvc watch` as the table's owner"
        " (--database-url), or grant the role TRIGGER on it",
        layer=layer_id,
    )


def installed(conn: psycopg.Connection[Any]) -> bool:
    """Whether the log is there (a layer was ever watched in this database)."""
    row = conn.execute(f"SELECT to_regclass('{SCHEMA}.watched') IS NOT NULL").fetchone()
    return bool(row and row[0])


def watched(conn: psycopg.Connection[Any]) -> list[Watched]:
    """The watched layers, by id (none before the first is watched)."""
    if not installed(conn):
        return []
    rows = conn.execute(
        f"SELECT layer, geometry_column, since FROM {SCHEMA}.watched ORDER BY layer"
    ).fetchall()
    return [Watched(*row) for row in rows]


def changes_after(conn: psycopg.Connection[Any], position: int, limit: int) -> list[Change]:
    """The first ``limit`` changes of the log after ``position``, in order (none before a
    layer was first watched)."""
    if not installed(conn):
        return []
    rows = conn.execute(
        f"""
        SELECT c.id, c.layer, c.op, c.rows, (
            SELECT array_agg(ARRAY[ST_XMin(d.geom), ST_YMin(d.geom), ST_XMax(d.geom),
                                   ST_YMax(d.geom)])
            FROM ST_Dump(c.boxes) d
        )
        FROM {LOG} c WHERE c.id > %s ORDER BY c.id LIMIT %s
        """,
        (position, limit),
    ).fetchall()
    return [
        Change(
            int(i), layer, op, None if boxes is None else [list(map(float, b)) for b in boxes], rows
        )
        for i, layer, op, rows, boxes in rows
    ]


def newest_change(conn: psycopg.Connection[Any]) -> int:
    """The id of the newest change ever logged (0: none, or no log)."""
    if not installed(conn):
        return 0
    row = conn.execute(
        f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {LOG}_id_seq"
    ).fetchone()
    return int(row[0]) if row else 0


def prune(conn: psycopg.Connection[Any], upto: int) -> int:
    """Remove the changes up to ``upto`` (read and applied); how many."""
    return conn.execute(f"DELETE FROM {LOG} WHERE id <= %s", (upto,)).rowcount


def start_watching(conninfo: str, client: redis.Redis, layer: VectorLayer) -> Watched:
    """Watch ``layer`` (:func:`watch`) and list it where the API looks (its cached answers are
    then kept until a change of them: :data:`~shared.vector.cache.WATCHED_KEY`)."""
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        found = watch(conn, layer)
    client.sadd(WATCHED_KEY, layer.id)
    return found


def stop_watching(conninfo: str, client: redis.Redis, layer: VectorLayer) -> None:
    """Stop watching ``layer`` (:func:`unwatch`); its answers are versioned by the table's
    statistics again."""
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        unwatch(conn, layer)
    client.srem(WATCHED_KEY, layer.id)


def watched_layers(conninfo: str) -> list[Watched]:
    """The watched layers (:func:`watched`)."""
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        return watched(conn)
