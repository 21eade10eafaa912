"""Vector test tables in the session's PostGIS database, and an app on them."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import create_engine
from starlette.testclient import TestClient

from api.app import create_app
from shared.demo import load_countries
from shared.settings import Settings
from tests.conftest import SHARED_DATA

POINTS = 300


def pg(database_url: str) -> str:
    return database_url.replace("+psycopg", "")


@pytest.fixture(scope="session")
def vector_tables(database_url: str) -> str:
    """Countries (the shared shapefile), points, lines, a view, a UTM table, a table without key."""
    engine = create_engine(database_url)
    load_countries(engine, SHARED_DATA)
    engine.dispose()
    with psycopg.connect(pg(database_url), autocommit=True) as conn:
        conn.execute(
            """
            DROP TABLE IF EXISTS test_points, test_lines, test_utm, test_nopk CASCADE;
            DROP VIEW IF EXISTS big_countries;
            CREATE TABLE test_points (id serial PRIMARY KEY, name text, kind text, value integer,
                                      geom geometry(Point, 4326));
            INSERT INTO test_points (name, kind, value, geom)
              SELECT 'point ' || i, CASE WHEN i % 3 = 0 THEN 'Shop' ELSE 'house' END, i,
                     ST_SetSRID(ST_Point(-10 + (i % 20), 40 + (i / 20)), 4326)
              FROM generate_series(1, %(n)s) AS i;
            CREATE INDEX ON test_points USING gist (geom);
            CREATE TABLE test_lines (id integer PRIMARY KEY, name text,
                                     geom geometry(LineString, 4326));
            INSERT INTO test_lines VALUES
              (1, 'equator part', ST_GeomFromText('LINESTRING(0 0, 10 0)', 4326)),
              (2, 'meridian part', ST_GeomFromText('LINESTRING(0 0, 0 10)', 4326));
            CREATE VIEW big_countries AS
              SELECT id, name, iso_a3, pop_est, geom FROM countries WHERE pop_est > 100000000;
            CREATE TABLE test_utm (id integer PRIMARY KEY, name text,
                                   geom geometry(Point, 32618));
            INSERT INTO test_utm VALUES (1, 'nassau', ST_Transform(
              ST_SetSRID(ST_Point(-77.35, 25.06), 4326), 32618));
            CREATE TABLE test_nopk (name text, geom geometry(Point, 4326));
            INSERT INTO test_nopk VALUES ('a', ST_SetSRID(ST_Point(1, 1), 4326));
            CREATE SCHEMA IF NOT EXISTS private;
            DROP TABLE IF EXISTS private.secret;
            CREATE TABLE private.secret (id integer PRIMARY KEY, geom geometry(Point, 4326));
            ANALYZE;
            """.replace("%(n)s", str(POINTS))
        )
    return database_url


@pytest.fixture(scope="module")
def vc(settings: Settings, vector_tables: str) -> Iterator[TestClient]:
    """The API on the vector tables (catalogue read fresh for the module)."""
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client
