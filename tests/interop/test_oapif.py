"""GDAL's OGC API – Features driver (``OAPIF:``) reads our features: a program nobody here wrote.

From the landing page with a key in its URL, ``ogrinfo`` lists the collections the key may see,
and ``ogr2ogr`` reads every feature of the points (following our ``next`` links, each carrying
the key) with their fields and values, and those an attribute filter (``-where``) keeps: GDAL
3.6 applies it on its side, over every page read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from shared.settings import Settings
from tests.conftest import POINTS, pg, served
from tests.interop.gdal import reader_key, run


@pytest.fixture(scope="module")
def server(settings: Settings, vector_tables: str) -> Iterator[str]:
    """A real server on the vector tables."""
    with served(settings) as base:
        yield base


@pytest.fixture(scope="module")
def key(server: str) -> str:
    """A reader's key limited to the points."""
    return reader_key(server, "oapif", ["public.test_points"])


def test_ogrinfo_lists_the_collections_the_key_sees(server: str, key: str) -> None:
    listed = run("ogrinfo", "-ro", "-so", "-q", f"OAPIF:{server}/api-user/ogc?api_key={key}")
    assert "public.test_points" in listed
    assert "test_lines" not in listed  # the key does not see it
    assert "countries" not in listed


def test_ogr2ogr_reads_every_point_with_its_fields(
    server: str, key: str, vector_tables: str, tmp_path: Path
) -> None:
    out = tmp_path / "points.geojson"
    landing = f"OAPIF:{server}/api-user/ogc?api_key={key}"
    # a small page: GDAL follows 3 next links
    run("ogr2ogr", "-f", "GeoJSON", "-oo", "PAGE_SIZE=100", str(out), landing, "public.test_points")
    features = json.loads(out.read_text())["features"]
    with psycopg.connect(pg(vector_tables)) as conn:
        rows = conn.execute(
            "SELECT id, name, kind, value, ST_X(geom), ST_Y(geom) FROM test_points ORDER BY id"
        ).fetchall()
    assert len(rows) == POINTS
    got = sorted(
        (
            f["properties"]["id"],
            f["properties"]["name"],
            f["properties"]["kind"],
            f["properties"]["value"],
            *f["geometry"]["coordinates"],
        )
        for f in features
    )
    assert got == [tuple(row) for row in rows]


def test_ogr2ogr_filters_what_it_reads(server: str, key: str, tmp_path: Path) -> None:
    out = tmp_path / "shops.geojson"
    landing = f"OAPIF:{server}/api-user/ogc?api_key={key}"
    where = "kind = 'Shop' AND value > 250"
    run("ogr2ogr", "-f", "GeoJSON", "-where", where, str(out), landing, "public.test_points")
    values = sorted(f["properties"]["value"] for f in json.loads(out.read_text())["features"])
    assert values == [v for v in range(251, POINTS + 1) if v % 3 == 0]
