"""height (spec 2.9): local DEMs against GDAL's own reading, and Open Topo Data."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import rasterio
from affine import Affine
from starlette.testclient import TestClient

from shared.demo import DEMO_DATA
from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import app_client, with_providers
from tests.providers import fakes

ZIP = DEMO_DATA / "dem" / "N10W110.hgt.zip"
# SRTM3: 1201 x 1201 cells, pixel centres on whole multiples of 3" from 10°N, 110°W
ORIGIN_X, ORIGIN_Y, STEP = -110.0 - 1 / 2400, 11.0 + 1 / 2400, 1 / 1200
ROW, COL = 816, 927  # on Clipperton Island: heights above 0 around this cell


def centre(col: int, row: int) -> tuple[float, float]:
    return ORIGIN_X + (col + 0.5) * STEP, ORIGIN_Y - (row + 0.5) * STEP


def gdal_value(dem: Path, lon: float, lat: float) -> float:
    """The cell value at a point as ``gdallocationinfo`` reads it."""
    out = subprocess.run(
        [
            "gdallocationinfo",
            "-valonly",
            "-wgs84",
            f"/vsizip/{dem}/N10W110.hgt",
            str(lon),
            str(lat),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip())


@pytest.fixture(scope="module")
def dem_dir(settings: Settings) -> Path:
    root = settings.dirs.dem
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ZIP, root / ZIP.name)
    # a GeoTIFF in Web Mercator with a nodata hole, elsewhere in the world (0..0.01°E, 0..0.01°N)
    data = np.full((10, 10), 50, dtype="int16")
    data[0, 0] = -9999
    with rasterio.open(
        root / "mercator.tif",
        "w",
        driver="GTiff",
        width=10,
        height=10,
        count=1,
        dtype="int16",
        crs="EPSG:3857",
        transform=Affine(111.32, 0, 0, 0, -111.32, 1113.2),
        nodata=-9999,
    ) as ds:
        ds.write(data, 1)
    (root / "notes.txt").write_text("not a DEM")
    return root


def test_height_at_cell_centres_is_gdals_value(bare_client: TestClient, dem_dir: Path) -> None:
    for col, row in [(COL, ROW), (COL + 1, ROW), (COL, ROW + 1), (COL + 3, ROW - 2), (5, 5)]:
        lon, lat = centre(col, row)
        r = bare_client.get("/api-user/height", params={"x": lon, "y": lat})
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "OK"
        (result,) = body["results"]
        assert result["dataset"] == "N10W110"
        assert result["location"] == {"lat": lat, "lng": lon}
        assert result["elevation"] == pytest.approx(
            gdal_value(dem_dir / ZIP.name, lon, lat), abs=1e-6
        )


def test_height_between_centres_is_bilinear(bare_client: TestClient, dem_dir: Path) -> None:
    (x0, y0), (x1, y1) = centre(COL, ROW), centre(COL + 1, ROW + 1)
    corners = [[gdal_value(dem_dir / ZIP.name, x, y) for x in (x0, x1)] for y in (y0, y1)]
    assert len({v for row in corners for v in row}) > 1, corners  # not a flat patch
    fx, fy = 0.25, 0.7
    lon, lat = x0 + fx * (x1 - x0), y0 + fy * (y1 - y0)
    expected = (
        corners[0][0] * (1 - fx) * (1 - fy)
        + corners[0][1] * fx * (1 - fy)
        + corners[1][0] * (1 - fx) * fy
        + corners[1][1] * fx * fy
    )
    r = bare_client.get("/api-user/height", params={"x": lon, "y": lat})
    assert r.json()["results"][0]["elevation"] == pytest.approx(expected, abs=1e-6)


def test_several_points_and_no_coverage(bare_client: TestClient, dem_dir: Path) -> None:
    lon, lat = centre(COL, ROW)
    r = bare_client.get(
        "/api-user/height", params={"locations": f"{lat},{lon}|0.005,0.005|0.0095,0.0005|45,45"}
    )
    assert r.status_code == 200
    srtm, merc, hole, outside = r.json()["results"]
    assert srtm["dataset"] == "N10W110"
    assert (merc["dataset"], merc["elevation"]) == ("mercator", 50.0)
    assert merc["location"] == {"lat": 0.005, "lng": 0.005}
    assert hole["dataset"] == "mercator"  # beside the nodata cell: its neighbours only
    assert hole["elevation"] == 50.0
    assert outside == {"dataset": "", "elevation": None, "location": {"lat": 45.0, "lng": 45.0}}


def test_height_from_opentopodata(psettings: Settings, dem_dir: Path) -> None:
    with app_client(psettings.model_copy(update={"height_source": "opentopodata"})) as tc:
        r = tc.get("/api-user/height", params={"locations": "10.5,-109.5|-70,10"})
    assert r.status_code == 200
    assert r.json() == {
        "results": [
            {"dataset": "srtm90m", "elevation": 110.5, "location": {"lat": 10.5, "lng": -109.5}},
            {"dataset": "srtm90m", "elevation": None, "location": {"lat": -70.0, "lng": 10.0}},
        ],
        "status": "OK",
    }
    (call,) = fakes.CALLS["opentopodata"]
    assert call[1] == "/opentopodata/v1/srtm90m"
    assert call[2] == {"locations": "10.5,-109.5|-70.0,10.0"}


def test_height_dem_then_provider(psettings: Settings, dem_dir: Path) -> None:
    lon, lat = centre(COL, ROW)
    with app_client(psettings.model_copy(update={"height_source": "dem+opentopodata"})) as tc:
        r = tc.get("/api-user/height", params={"locations": f"{lat},{lon}|45,45"})
    local, remote = r.json()["results"]
    assert local["dataset"] == "N10W110"
    assert remote == {
        "dataset": "srtm90m",
        "elevation": 145.0,
        "location": {"lat": 45.0, "lng": 45.0},
    }
    assert fakes.CALLS["opentopodata"][0][2] == {"locations": "45.0,45.0"}  # only the uncovered


def test_height_provider_failures(psettings: Settings) -> None:
    with app_client(psettings.model_copy(update={"height_source": "opentopodata"})) as tc:
        fakes.MODE["opentopodata"] = "garbage"
        assert tc.get("/api-user/height", params={"x": 1, "y": 2}).status_code == 520
    unset = with_providers(psettings, opentopodata={"url": None})
    with app_client(unset.model_copy(update={"height_source": "opentopodata"})) as tc:
        r = tc.get("/api-user/height", params={"x": 1, "y": 2})
    assert r.status_code == 503
    assert_error(r.json(), "not-configured")


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"x": 1}, "y"),
        ({"y": 1}, "x"),
        ({"x": "east", "y": 1}, "x"),
        ({"x": -180.5, "y": 1}, "x"),
        ({"x": "nan", "y": 1}, "x"),
        ({"locations": ""}, "x"),  # an empty parameter is an absent one
        ({"locations": "91,0"}, "locations"),
        ({"locations": "1;2"}, "locations"),
        ({"locations": "|".join(["1,2"] * 101)}, "locations"),
    ],
)
def test_height_bad_input(bare_client: TestClient, params: dict, parameter: str) -> None:
    r = bare_client.get("/api-user/height", params=params)
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter
