"""Coverages: the tiles of each zoom that meet a polygon, a box of any CRS, a buffer; hostile
geometries refused at once; the plan and chunks of a run over a coverage."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import shapely  # type: ignore[import-untyped]
from pyproj import Transformer

from shared.base.grid import TMS, TileAddress
from shared.errors import InvalidInputError
from shared.seeding.coverage import MAX_VERTICES, Coverage
from shared.seeding.plan import CHUNK, chunks, count_chunks, plan_pretile

#: over the Landsat scene of the demo rasters
TRIANGLE = [[[-78.9, 23.6], [-76.6, 23.6], [-78.9, 25.5], [-78.9, 23.6]]]
L_SHAPE = [
    [[-78.9, 23.6], [-76.6, 23.6], [-76.6, 24.0], [-78.5, 24.0], [-78.5, 25.5], [-78.9, 25.5]]
    + [[-78.9, 23.6]]
]


def polygon(rings: list[Any]) -> dict[str, Any]:
    return {"type": "Polygon", "coordinates": rings}


def brute_force(shape: Any, z: int) -> set[tuple[int, int, int]]:
    """Every tile of the shape's bounding range whose area overlaps it (shapely, one by one)."""
    w, s, e, n = shape.bounds
    top_left, bottom_right = TMS.tile(w, n, z), TMS.tile(e, s, z)
    found = set()
    for x in range(top_left.x - 1, bottom_right.x + 2):
        for y in range(top_left.y - 1, bottom_right.y + 2):
            box = shapely.box(*TileAddress(z, x, y).bounds_4326())
            if shape.intersection(box).area > 0:
                found.add((z, x, y))
    return found


NEIGHBOURS = [(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1)]


def ring_around(tiles: set[TileAddress]) -> set[TileAddress]:
    """The tiles and their eight neighbours."""
    return {TileAddress(t.z, t.x + dx, t.y + dy) for t in tiles for dx, dy in NEIGHBOURS}


def overlaps(shape: Any, tile: TileAddress, pixels: int) -> bool:
    """Whether the tile, grown by ``pixels`` on each side, overlaps the shape."""
    n, grow = 2**tile.z, pixels / 256

    def lat(y: float) -> float:
        return math.degrees(math.atan(math.sinh(math.pi * (1 - 2 * y / n))))

    west, east = [(x * 360 / n - 180) for x in (tile.x - grow, tile.x + 1 + grow)]
    box = shapely.box(west, lat(tile.y + 1 + grow), east, lat(tile.y - grow))
    return bool(shape.intersection(box).area > 0)


@pytest.mark.parametrize("rings", [TRIANGLE, L_SHAPE], ids=["triangle", "L"])
def test_a_polygons_plan_and_chunks_are_the_tiles_that_overlap_it(rings: list[Any]) -> None:
    coverage = Coverage.of_geojson(polygon(rings))
    shape = shapely.Polygon(rings[0])
    plan = plan_pretile(coverage, 5, 13, cap=10**6)
    expected = {z: brute_force(shape, z) for z in range(5, 13)}

    assert [(e["zoom"], e["tiles"]) for e in plan["zooms"]] == [
        (z, len(expected[z])) for z in range(5, 13)
    ]
    every = list(chunks(coverage, plan))
    tiles = [(t.z, t.x, t.y) for c in every for t in c.tiles()]
    assert len(tiles) == len(set(tiles)) == plan["total"] == sum(c.size for c in every)
    assert set(tiles) == set().union(*expected.values())
    assert len(every) == count_chunks(coverage, plan)
    for chunk in every:  # inside one aligned block, and never empty
        assert chunk.size > 0
        assert chunk.x0 // CHUNK == chunk.x1 // CHUNK
        assert chunk.y0 // CHUNK == chunk.y1 // CHUNK
    for start in (0, 1, len(every) // 2, len(every) - 1, len(every)):
        assert list(chunks(coverage, plan, start)) == every[start:], start


def test_a_box_in_web_mercator_covers_what_the_same_box_in_degrees_does() -> None:
    west, south, east, north = -78.9, 23.6, -76.6, 25.5
    to_3857 = Transformer.from_crs("EPSG:4326", "EPSG:3857", always_xy=True)
    x0, y0 = to_3857.transform(west, south)
    x1, y1 = to_3857.transform(east, north)
    mercator = Coverage.of_bbox(f"{x0},{y0},{x1},{y1}", "EPSG:3857")
    degrees = Coverage.of_bbox(f"{west},{south},{east},{north}")

    for z in range(4, 14):
        assert (
            mercator.count(z)
            == degrees.count(z)
            == len(brute_force(shapely.box(west, south, east, north), z))
        )
        assert set(mercator.tiles(z)) == set(degrees.tiles(z))
    # another CRS: a polygon (UTM 18N, turned a little from north), its edges densified; its
    # corners leave out some tiles of its bounding box only at zoom 14
    utm = Coverage.of_bbox("300000,2650000,400000,2800000", "EPSG:32618")
    assert utm.geometry is not None
    assert {(t.z, t.x, t.y) for t in utm.tiles(14)} == brute_force(utm.geometry, 14)
    assert 0 < utm.count(14) < Coverage.box(utm.bounds).count(14)


def test_a_buffer_adds_the_ring_of_neighbours() -> None:
    tile = TileAddress(10, 290, 438)
    box = tile.bounds_4326()

    assert set(Coverage.box(box).tiles(10)) == {tile}
    ring = {TileAddress(10, 290 + dx, 438 + dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1)}
    assert set(Coverage.box(box, buffer=1).tiles(10)) == ring
    # a zoom deeper, the tile's four children and the ring of 12 around them
    assert Coverage.box(box).count(11) == 4
    assert Coverage.box(box, buffer=1).count(11) == 16
    # the same on a polygon
    shape = Coverage.of_geojson(
        polygon([[[-78.0, 24.0], [-77.0, 24.0], [-77.5, 25.0], [-78.0, 24.0]]])
    )
    grown = Coverage.of_geojson(shape.to_json()["geometry"], buffer=16)
    assert shape.geometry is not None
    for z in (8, 10, 12):
        inner, outer = set(shape.tiles(z)), set(grown.tiles(z))
        assert outer == {t for t in ring_around(inner) if overlaps(shape.geometry, t, 16)}
        # at zoom 8 no tile edge is 16 pixels from the triangle's; deeper, some are
        assert inner <= outer if z == 8 else inner < outer


def test_the_json_form_gives_the_same_coverage() -> None:
    coverage = Coverage.of_geojson(polygon(L_SHAPE), buffer=3)
    again = Coverage.from_json(coverage.to_json())
    assert again.buffer == 3
    assert [again.count(z) for z in range(6, 12)] == [coverage.count(z) for z in range(6, 12)]
    assert Coverage.from_json([-78.9, 23.6, -76.6, 25.5]).count(9) == 20  # a footprint


HOSTILE = {
    "a million vertices": (
        polygon([[[0.5, 0.5]] * 1_000_000]),
        f"more than {MAX_VERTICES} vertices",
    ),
    "NaN": (polygon([[[0, 0], [1, 0], [float("nan"), 1], [0, 0]]]), "finite numbers"),
    "self-intersecting": (
        polygon([[[0, 0], [1, 1], [1, 0], [0, 1], [0, 0]]]),
        "not a valid polygon: Self-intersection",
    ),
    "a line": ({"type": "LineString", "coordinates": [[0, 0], [1, 1]]}, "Polygon or MultiPolygon"),
    "a feature of a point": (
        {"type": "Feature", "geometry": {"type": "Point", "coordinates": [0, 0]}},
        "Polygon or MultiPolygon",
    ),
    "an open ring": (polygon([[[0, 0], [1, 0], [1, 1], [0, 1]]]), "end where it starts"),
    "a short ring": (polygon([[[0, 0], [1, 0], [0, 0]]]), "at least 4 positions"),
    "out of range": (polygon([[[0, 0], [200, 0], [0, 1], [0, 0]]]), "outside longitudes"),
    "booleans": (polygon([[[True, 0], [1, 0], [0, 1], [True, 0]]]), "finite numbers"),
    "no rings": (polygon([]), "no coordinates"),
    "text": ("POLYGON((0 0,1 0,0 1,0 0))", "Polygon or MultiPolygon"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_geometry_is_refused_at_once(name: str) -> None:
    data, message = HOSTILE[name]
    started = time.perf_counter()
    with pytest.raises(InvalidInputError, match=message) as caught:
        Coverage.of_geojson(data)
    assert time.perf_counter() - started < 0.1
    assert caught.value.detail == {"parameter": "body"}


def test_a_bad_bbox_or_buffer_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="outside the valid area"):
        Coverage.of_bbox("0,0,1e9,1e9", "EPSG:3857")
    with pytest.raises(InvalidInputError, match="buffer must be 0..256"):
        Coverage.box([0, 0, 1, 1], buffer=257)


def test_a_country_plan_of_100k_tiles_takes_well_under_a_second() -> None:
    """A country-sized polygon of 5,000 vertices (a ragged disc of ~800 km): plan, then every
    chunk, timed."""
    n = 5000
    ring = [
        [
            round(31 + 6 * (1 + 0.05 * math.sin(37 * a)) * math.cos(a), 7),
            round(49 + 4 * (1 + 0.05 * math.sin(37 * a)) * math.sin(a), 7),
        ]
        for a in (2 * math.pi * i / n for i in range(n))
    ]
    coverage = Coverage.of_geojson(polygon([[*ring, ring[0]]]))
    started = time.perf_counter()
    plan = plan_pretile(coverage, 0, 14, cap=10**6)
    planned = time.perf_counter() - started
    assert 80_000 < plan["total"] < 200_000
    assert planned < 1.0, planned
    started = time.perf_counter()
    assert sum(c.size for c in chunks(coverage, plan)) == plan["total"]
    produced = time.perf_counter() - started
    assert produced < 2.0, produced
    print(
        f"plan of {plan['total']} tiles: {planned * 1000:.0f} ms; chunks: {produced * 1000:.0f} ms"
    )
