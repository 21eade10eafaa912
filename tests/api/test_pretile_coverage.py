"""Pre-tiling over a coverage: a box of any CRS, a GeoJSON polygon, a vector layer's polygons;
the run makes exactly the covered tiles; hostile coverages are refused at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import shapely  # type: ignore[import-untyped]
from pyproj import Transformer
from starlette.testclient import TestClient

from shared.seeding.coverage import MAX_VERTICES, Coverage
from shared.seeding.plan import PLAN_MAX_S, chunks, plan_pretile
from shared.settings import Settings
from tests.checks import ADMIN_KEY, assert_error
from tests.layers import stored_tiles

TRIANGLE = {
    "type": "Polygon",
    "coordinates": [[[-78.9, 23.6], [-76.6, 23.6], [-78.9, 25.5], [-78.9, 23.6]]],
}
BOX = (-78.9, 23.6, -76.6, 25.5)


def zooms(plan: dict[str, object]) -> list[tuple[int, int]]:
    return [(z["zoom"], z["tiles"]) for z in plan["zooms"]]  # type: ignore[attr-defined]


def test_a_bbox_in_any_crs_plans_the_tiles_meeting_it(client: TestClient, scene: str) -> None:
    # httpx's params replace a query in the URL: every parameter goes in params
    url, dry = (
        f"/api-user/gis-layer-pretile/{scene}",
        {"dryrun": "1", "minzoom": "6", "maxzoom": "13"},
    )
    degrees = client.get(url, params={**dry, "bbox": ",".join(map(str, BOX))}).json()
    to_3857 = Transformer.from_crs("EPSG:4326", "EPSG:3857", always_xy=True)
    x0, y0 = to_3857.transform(BOX[0], BOX[1])
    x1, y1 = to_3857.transform(BOX[2], BOX[3])
    box_3857 = {"bbox": f"{x0},{y0},{x1},{y1}", "bbox_crs": "EPSG:3857"}
    mercator = client.get(url, params={**dry, **box_3857})
    assert zooms(mercator.json()) == zooms(degrees) == zooms(plan_pretile(list(BOX), 6, 13))
    footprint = client.get(url, params=dry).json()  # the layer's footprint, as before
    assert degrees["total"] < footprint["total"]
    grown = client.get(url, params={**dry, "bbox": ",".join(map(str, BOX)), "buffer": "64"}).json()
    assert grown["total"] > degrees["total"]
    assert zooms(grown) == zooms(plan_pretile(Coverage.box(BOX, 64), 6, 13))


@pytest.mark.worker
def test_a_polygon_run_makes_exactly_its_tiles(
    client: TestClient, settings: Settings, scene: str, worker: subprocess.Popen[bytes]
) -> None:
    url = f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=12"
    plan = client.post(f"{url}&dryrun=1", json=TRIANGLE).json()
    coverage = Coverage.of_geojson(TRIANGLE)
    expected = {(t.z, t.x, t.y) for c in chunks(coverage, plan) for t in c.tiles()}
    assert zooms(plan) == [(z, coverage.count(z)) for z in range(8, 12)]
    shape = shapely.Polygon(TRIANGLE["coordinates"][0])
    assert all(
        shape.intersection(shapely.box(*t.bounds_4326())).area > 0
        for c in chunks(coverage, plan)
        for t in c.tiles()
    )
    feature = {"type": "Feature", "properties": {}, "geometry": TRIANGLE}
    r = client.post(url, json=feature)
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["rendered"] == plan["total"] == len(expected)
    assert [(z["zoom"], z["tiles"], z["rendered"]) for z in result["zooms"]] == [
        (z, n, n) for z, n in zooms(plan)
    ]
    assert stored_tiles(settings, scene) == expected  # the box's other tiles are not made


@pytest.mark.usefixtures("vector_tables")
def test_a_coverage_layer_with_where_picks_its_polygons(client: TestClient, scene: str) -> None:
    url = f"/api-user/gis-layer-pretile/{scene}"
    dry = {"dryrun": "1", "minzoom": "5", "maxzoom": "11"}
    query = {**dry, "coverage_layer": "public.countries", "where": "iso_a3 = 'BHS'"}
    started = time.perf_counter()
    plan = client.get(url, params=query).json()
    print(f"coverage of the Bahamas planned in {(time.perf_counter() - started) * 1000:.0f} ms")
    whole = client.get(url, params={**dry, "bbox": "-79.5,20.9,-72.5,27.3"}).json()  # its bounds
    assert 0 < plan["total"] < whole["total"]
    cuba = client.get(url, params={**query, "where": "iso_a3 = 'CUB'"}).json()
    assert cuba["total"] != plan["total"]
    empty = client.get(url, params={**query, "where": "iso_a3 = 'XXX'"})
    assert empty.status_code == 422
    assert "the coverage is empty" in assert_error(empty.json(), "unprocessable")["message"]
    bad = client.get(url, params={**query, "where": "nosuch = 1"})
    assert bad.status_code == 400, bad.text
    # a where that is not a filter of the layer is refused naming where, never a 5xx
    for wrong in (
        "nosuch = 1",
        "pop_est = true",
        "name LIKE 5",
        "pop_est IN (" + "1," * 200 + "1)",
    ):
        r = client.get(url, params={**query, "where": wrong})
        assert r.status_code == 400, (wrong, r.text)
        error = assert_error(r.json(), "invalid-input")
        assert error["detail"]["parameter"] == "where", (wrong, error)
        assert error["message"].startswith("where: "), (wrong, error)
    points = client.get(url, params={**dry, "coverage_layer": "public.test_points"})
    assert "not polygons" in assert_error(points.json(), "invalid-input")["message"]
    lost = client.get(url, params={**dry, "coverage_layer": "public.nosuch"})
    assert lost.status_code == 404


def test_one_coverage_at_a_time(client: TestClient, scene: str) -> None:
    url = f"/api-user/gis-layer-pretile/{scene}"
    both = client.post(url, params={"dryrun": "1", "bbox": "0,0,1,1"}, json=TRIANGLE)
    assert "give one coverage, not bbox and body" in both.json()["error"]["message"]
    where = client.get(url, params={"dryrun": "1", "where": "name = 'x'"})
    assert assert_error(where.json(), "invalid-input")["detail"] == {"parameter": "where"}
    buffer = client.get(url, params={"dryrun": "1", "buffer": "999"})
    assert assert_error(buffer.json(), "invalid-input")["detail"] == {
        "parameter": "buffer",
        "value": "999",
    }


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (TRIANGLE | {"coordinates": [[[0.5, 0.5]] * 1_000_000]}, 413, "larger than"),
        (TRIANGLE | {"coordinates": [[[0, 0]] * (MAX_VERTICES + 1)]}, 400, "vertices"),
        (TRIANGLE | {"coordinates": [[[0, 0], [1, 1], [1, 0], [0, 1], [0, 0]]]}, 400, "valid"),
        ({"type": "LineString", "coordinates": [[0, 0], [1, 1]]}, 400, "type"),
        ('{"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [NaN, 1], [0, 0]]]}', 400, "finite"),
        (
            f'{{"type": "Polygon", "coordinates": [[[{"9" * 400}, 0], [1, 0], [1, 1], [0, 0]]]}}',
            400,
            "finite",
        ),
        ("[" * 30_000 + "]" * 30_000, 400, "not JSON"),
    ],
    ids=[
        "a million vertices",
        "too many vertices",
        "self-intersecting",
        "a line",
        "NaN",
        "a number of 400 digits",
        "nested past Python's depth",
    ],
)
def test_a_hostile_body_is_refused_at_once(
    client: TestClient, scene: str, body: object, status: int, message: str
) -> None:
    data = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
    started = time.perf_counter()
    r = client.post(
        f"/api-user/gis-layer-pretile/{scene}?dryrun=1",
        content=data,
        headers={"Content-Type": "application/json"},
    )
    assert time.perf_counter() - started < 1.0
    assert r.status_code == status, r.text
    assert message in r.json()["error"]["message"]


def test_the_seed_command_prints_the_plan(live_server: str, scene: str, tmp_path: Path) -> None:
    (tmp_path / "triangle.json").write_text(json.dumps(TRIANGLE))
    argv = [sys.executable, "-m", "api.cli", "seed", scene, "--minzoom", "8", "--maxzoom", "10"]
    argv += [
        "--geojson",
        str(tmp_path / "triangle.json"),
        "--dryrun",
        "--url",
        f"{live_server}/api/v1",
    ]
    env = {**os.environ, "MAPSVC_KEY": ADMIN_KEY}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=True)
    coverage = Coverage.of_geojson(TRIANGLE)
    assert out.stdout.splitlines() == [
        f"zoom 8: {coverage.count(8)} tiles",
        f"zoom 9: {coverage.count(9)} tiles",
        f"total: {coverage.count(8) + coverage.count(9)} tiles",
    ]


def test_a_plan_of_any_size_is_bounded_work(client: TestClient, scene: str) -> None:
    """The edge of a box just inside the world has millions of tiles at zoom 24: a zoom whose
    edge is too long to walk is not counted (``tiles`` null, cut), nor is any zoom below it; as
    the first zoom, it makes the plan too large."""
    url = f"/api-user/gis-layer-pretile/{scene}"
    near_world = {"bbox": "-179.9,-85,179.9,85", "dryrun": "1"}
    started = time.perf_counter()
    plan = client.get(url, params={**near_world, "minzoom": "0", "maxzoom": "25"}).json()
    assert time.perf_counter() - started < 20
    counted = [z["tiles"] for z in plan["zooms"]]
    assert counted[:4] == [1, 4, 16, 64]  # every tile of the first zooms meets it
    first_open = counted.index(None)
    assert all(n is None for n in counted[first_open:])
    assert first_open < 20
    assert set(plan["cut"]) >= set(range(first_open, 25))
    assert not plan["over_ceiling"]
    started = time.perf_counter()
    r = client.get(url, params={**near_world, "minzoom": "22", "maxzoom": "23", "dryrun": "0"})
    assert time.perf_counter() - started < 20
    assert r.status_code == 422
    assert "too large to count" in assert_error(r.json(), "unprocessable")["message"]
    # a comb of thin teeth: each tile tested costs its thousands of vertices; the plan stops
    # counting after PLAN_MAX_S, whatever the zooms
    teeth = [
        [round(x, 1), y]
        for i in range(900)
        for x, y in (
            (-170 + i * 0.3, -70),
            (-170 + i * 0.3, 80),
            (-169.9 + i * 0.3, 80),
            (-169.9 + i * 0.3, -70),
        )
    ]
    comb = {"type": "Polygon", "coordinates": [[[-170, -80], *teeth, [100, -80], [-170, -80]]]}
    started = time.perf_counter()
    r = client.post(url, params={"dryrun": "1", "minzoom": "0", "maxzoom": "25"}, json=comb)
    assert time.perf_counter() - started < PLAN_MAX_S + 10, r.text
    assert r.status_code == 200, r.text
    assert r.json()["zooms"][-1]["tiles"] is None
