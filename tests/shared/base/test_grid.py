"""The tile grid: tile addresses from URL parts, their bounds, and overlap with a footprint."""

from __future__ import annotations

import pytest

from shared.base.grid import TileAddress, parse_tile
from shared.errors import InvalidInputError, NotFoundError

#: half the side of the Web Mercator world, in metres, and the latitude of its edge
HALF = 20037508.342789244
EDGE_LAT = 85.0511287798066


def test_a_tile_is_read_from_its_url_parts() -> None:
    assert parse_tile("3", "0", "7") == TileAddress(3, 0, 7)
    assert parse_tile("24", str(2**24 - 1), "0") == TileAddress(24, 2**24 - 1, 0)


@pytest.mark.parametrize(
    ("z", "x", "y", "parameter", "message"),
    [
        ("z", "0", "0", "z", "z must be an integer"),
        ("1.5", "0", "0", "z", "z must be an integer"),
        ("25", "0", "0", "z", "z must be 0..24"),
        ("-1", "0", "0", "z", "z must be 0..24"),
        ("3", "0", "-1", "y", "y must be 0 or more"),
    ],
)
def test_a_tile_off_the_grid_is_refused_naming_its_part(
    z: str, x: str, y: str, parameter: str, message: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_tile(z, x, y)

    assert caught.value.message == message
    assert caught.value.detail["parameter"] == parameter


@pytest.mark.parametrize(("x", "y", "parameter"), [("8", "0", "x"), ("0", "8", "y")])
def test_a_tile_past_the_zooms_last_does_not_exist(x: str, y: str, parameter: str) -> None:
    with pytest.raises(NotFoundError) as caught:
        parse_tile("3", x, y)

    assert caught.value.message == f"no such tile: {parameter} is 0..7 at zoom 3"
    assert caught.value.detail["parameter"] == parameter


def test_bounds_in_metres_and_in_degrees() -> None:
    assert TileAddress(0, 0, 0).bounds_3857() == pytest.approx((-HALF, -HALF, HALF, HALF))
    # zoom 1: x grows eastwards, y southwards
    assert TileAddress(1, 1, 0).bounds_3857() == pytest.approx((0, 0, HALF, HALF), abs=1e-6)
    assert TileAddress(1, 0, 1).bounds_4326() == pytest.approx((-180, -EDGE_LAT, 0, 0), abs=1e-9)
    west, _, east, _ = TileAddress(10, 290, 442).bounds_3857()
    assert east - west == pytest.approx(2 * HALF / 2**10)


def test_a_tile_intersects_a_footprint_it_overlaps_not_one_it_touches() -> None:
    tile = TileAddress(2, 1, 1)  # 90 W..0, equator..66.5 N
    w, s, e, n = tile.bounds_4326()
    assert (w, s, e) == pytest.approx((-90.0, 0.0, 0.0), abs=1e-9)

    assert tile.intersects([w + 1, s + 1, w + 2, s + 2])
    assert tile.intersects([-200.0, -90.0, 200.0, 90.0])
    for touching in ([e, s, e + 10, n], [w - 10, s, w, n], [w, s - 10, e, s], [w, n, e, n + 10]):
        assert not tile.intersects(touching), touching
    assert not tile.intersects([10.0, 10.0, 20.0, 20.0])
