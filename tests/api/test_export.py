"""Export to MBTiles and PMTiles (issue 25), on a real worker, read by readers nobody here
wrote: GDAL's MBTiles driver (raster and vector), Protomaps' ``pmtiles`` reader; over every
coverage pre-tiling takes, its tiles exactly those of pre-tiling's plan."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import rasterio
import redis
from pmtiles.reader import MmapSource, Reader, all_tiles
from pmtiles.tile import TileType
from pyproj import Transformer
from starlette.testclient import TestClient

from shared.base.grid import TileAddress
from shared.seeding.coverage import Coverage
from shared.seeding.export import KEEP_EXPORTS, _prune, export_folder, tiles_in_order
from shared.settings import Settings
from shared.tiles.styles import read_style
from tests.checks import AUTH, assert_error
from tests.conftest import POINTS, app_client, run_mapsvc
from tests.interop.gdal import run
from tests.jobs import job_lines, wait_running, wait_state
from tests.layers import RGB, decode, own_layer, tile_url

pytestmark = pytest.mark.worker

EXPORT = "/api-user/gis-layer-export"
POINTS_LAYER = "public.test_points"
#: the Landsat scene's zooms 8 and 9 (the end, 10, excluded)
ZOOMS = "minzoom=8&maxzoom=10"


@pytest.fixture(scope="module")
def api(settings: Settings, worker: subprocess.Popen[bytes]) -> Iterator[TestClient]:
    with app_client(settings) as client:
        yield client


@pytest.fixture(scope="module")
def scene(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> str:
    return own_layer(settings, rdb, RGB, "export", "scene.tif")


def export(api: TestClient, layer: str, query: str) -> dict[str, Any]:
    r = api.post(f"{EXPORT}/{layer}?{query}")
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def exported(settings: Settings, result: dict[str, Any]) -> Path:
    return export_folder(settings.dirs.exports, result["layer"]) / result["file"]


@pytest.fixture(scope="module")
def scene_mbtiles(api: TestClient, settings: Settings, scene: str) -> dict[str, Any]:
    return export(api, scene, f"archive=mbtiles&{ZOOMS}")


def rendered(api: TestClient, style: str, tile: TileAddress) -> np.ndarray:
    """The tile ``rtile`` renders afresh (``nocache=1``), decoded."""
    r = api.get(tile_url(style, tile.z, tile.x, tile.y, "?nocache=1"))
    assert r.status_code == 200
    return decode(r.content)


def test_raster_mbtiles_mosaics_in_gdal_equal_to_the_rtile_tiles(
    api: TestClient, settings: Settings, scene: str, scene_mbtiles: dict[str, Any], tmp_path: Path
) -> None:
    result = scene_mbtiles
    path = exported(settings, result)
    assert result["url"] == f"{EXPORT}/{scene}/files/{result['file']}"
    assert (result["archive"], result["tile_format"], result["maxzoom"]) == ("mbtiles", "png", 10)
    assert (result["minzoom"], result["zooms"]) == (8, [8, 9])  # the zooms it holds
    assert result["tiles"] == result["plan"]["total"] == result["rendered"] + result["outside"]
    assert result["cached"] == 0
    info = run("gdalinfo", str(path))
    assert "Driver: MBTiles/MBTiles" in info
    tif = tmp_path / "z9.tif"
    run("gdal_translate", "-q", "-of", "GTiff", str(path), str(tif))
    with rasterio.open(tif) as ds:
        mosaic, transform = ds.read(), ds.transform
    assert mosaic.shape[0] == 4  # RGBA, as the PNG tiles
    assert transform.a == pytest.approx(40075016.68557849 / 256 / 2**9)  # zoom 9, the last
    compared = 0
    for tile in tiles_in_order(9, Coverage.box(result["bounds"])):
        left, _, _, top = tile.bounds_3857()
        col, row = (
            round((left - transform.c) / transform.a),
            round((transform.f - top) / transform.a),
        )
        # the part of the tile inside GDAL's extent (the bounds cut the tiles at the edges)
        c0, r0 = max(col, 0), max(row, 0)
        c1, r1 = min(col + 256, mosaic.shape[2]), min(row + 256, mosaic.shape[1])
        expected = rendered(api, scene, tile)[:, r0 - row : r1 - row, c0 - col : c1 - col]
        assert np.array_equal(mosaic[:, r0:r1, c0:c1], expected), tile
        compared += (r1 - r0) * (c1 - c0)
    assert compared == mosaic.shape[1] * mosaic.shape[2]  # every pixel, once


def test_raster_export_takes_cached_tiles_and_fills_the_cache(
    api: TestClient, settings: Settings, scene: str, scene_mbtiles: dict[str, Any]
) -> None:
    # the first export rendered its tiles and stored them: rtile serves them from the cache
    tile = next(tiles_in_order(9, Coverage.box(scene_mbtiles["bounds"])))
    r = api.get(tile_url(scene, tile.z, tile.x, tile.y))
    assert r.headers["X-Cache"] == "HIT"
    again = export(api, scene, f"archive=pmtiles&{ZOOMS}")
    assert again["rendered"] == 0
    assert again["cached"] + again["outside"] == again["tiles"] == scene_mbtiles["tiles"]
    with exported(settings, again).open("rb") as f:
        assert Reader(MmapSource(f)).get(tile.z, tile.x, tile.y) == r.content


def test_pmtiles_reader_reads_the_archive_and_identical_tiles_are_stored_once(
    api: TestClient, settings: Settings, scene: str
) -> None:
    # a box well beyond the scene: most of its tiles are empty, and identical
    bbox = "-80.5,22,-74.5,27.5"
    result = export(api, scene, f"archive=pmtiles&{ZOOMS}&bbox={bbox}")
    with exported(settings, result).open("rb") as f:
        reader = Reader(MmapSource(f))
        header, metadata = reader.header(), reader.metadata()
        assert (header["min_zoom"], header["max_zoom"]) == (8, 9)
        assert header["center_zoom"] == 8  # a zoom it holds
        assert (result["minzoom"], result["maxzoom"], result["zooms"]) == (8, 10, [8, 9])
        assert header["tile_type"] == TileType.PNG
        assert header["clustered"]
        w, s, e, n = (
            header[k] / 1e7 for k in ("min_lon_e7", "min_lat_e7", "max_lon_e7", "max_lat_e7")
        )
        assert [round(v, 6) for v in (w, s, e, n)] == [-80.5, 22.0, -74.5, 27.5]
        assert (metadata["format"], metadata["minzoom"], metadata["maxzoom"]) == ("png", 8, 9)
        assert header["addressed_tiles_count"] == result["tiles"] == result["plan"]["total"]
        assert header["tile_contents_count"] < header["addressed_tiles_count"]
        assert result["outside"] > header["addressed_tiles_count"] // 2
        inside = next(
            tiles_in_order(9, Coverage.box(read_style(settings.dirs.mapnik, scene).footprint))
        )
        tile = reader.get(inside.z, inside.x, inside.y)
        assert np.array_equal(decode(tile), rendered(api, scene, inside))
        assert tile == api.get(tile_url(scene, inside.z, inside.x, inside.y)).content


def test_vector_mbtiles_is_read_by_ogr(
    api: TestClient, settings: Settings, vector_tables: str
) -> None:
    result = export(api, POINTS_LAYER, "minzoom=0&maxzoom=1")
    assert (result["tile_format"], result["tiles"], result["made"]) == ("mvt", 1, 1)
    path = str(exported(settings, result))
    summary = run("ogrinfo", "-ro", "-al", "-so", path)
    assert f"Layer name: {POINTS_LAYER}" in summary
    assert f"Feature Count: {POINTS}" in summary
    one = run("ogrinfo", "-ro", "-al", "-q", "-where", "name = 'point 5'", path)
    assert re.search(r"value \(\w+\) = 5(\.0+)?\n", one), one
    assert re.search(r"kind \(String\) = house\n", one), one
    x = float(re.findall(r"POINT \((\S+) ", one)[0])
    assert abs(x - -556597.45) < 40075016.69 / 4096  # lon -5 in metres, within a tile unit


def test_vector_export_without_data_in_the_box_fails_clearly(
    api: TestClient, vector_tables: str
) -> None:
    r = api.post(f"{EXPORT}/{POINTS_LAYER}?minzoom=5&maxzoom=6&bbox=100,-40,110,-30")
    assert r.status_code == 422
    assert "no tile" in assert_error(r.json(), "unprocessable")["message"]
    r = api.post(f"{EXPORT}/{POINTS_LAYER}?tile_format=png")
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "tile_format"


def test_an_export_above_the_cap_is_422_with_the_plan(api: TestClient, scene: str) -> None:
    r = api.post(f"{EXPORT}/{scene}?minzoom=0&maxzoom=25&bbox=-180,-85,180,85")
    assert r.status_code == 422
    plan = assert_error(r.json(), "unprocessable")["detail"]["plan"]
    assert [z["zoom"] for z in plan["zooms"]] == list(range(25))
    assert api.post(f"{EXPORT}/{scene}?minzoom=9&maxzoom=9").status_code == 400


def test_download_answers_ranges(
    api: TestClient, settings: Settings, scene: str, live_server: str
) -> None:
    result = export(api, scene, f"archive=pmtiles&{ZOOMS}")
    url = f"{live_server}{result['url']}"
    r = httpx.get(url, headers={**AUTH, "Range": "bytes=0-126"})
    assert r.status_code == 206
    assert r.headers["content-range"] == f"bytes 0-126/{result['bytes']}"
    assert r.content[:8] == b"PMTiles\x03"
    assert len(r.content) == 127
    whole = httpx.get(url, headers=AUTH)
    assert whole.content == exported(settings, result).read_bytes()
    assert whole.headers["content-type"] == "application/vnd.pmtiles"
    size = len(whole.content)
    outside = httpx.get(url, headers={**AUTH, "Range": f"bytes={size}-"})
    assert outside.status_code == 416
    assert outside.headers["content-range"] == f"bytes */{size}"
    assert assert_error(outside.json(), "range-not-satisfiable")["detail"] == {"size": size}
    assert httpx.get(url, headers={**AUTH, "Range": f"bytes={size - 1}-"}).status_code == 206
    for malformed in ("bytes=5-3", "bytes=x-", "items=0-1", "bytes=-"):  # ignored: the whole file
        r = httpx.get(url, headers={**AUTH, "Range": malformed})
        assert (r.status_code, len(r.content)) == (200, size), malformed


def limited_key(api: TestClient, role: str, layers: list[str]) -> dict[str, str]:
    body = {"name": f"export-{role}", "role": role, "layers": layers}
    r = api.post("/api-user/api-keys", json=body)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


def test_exports_of_a_hidden_layer_and_of_another_layer_are_404(
    api: TestClient,
    settings: Settings,
    rdb: redis.Redis,
    raster_dir: Path,
    scene: str,
    scene_mbtiles: dict[str, Any],
) -> None:
    other = own_layer(settings, rdb, RGB, "export", "other.tif")
    other_export = export(api, other, "minzoom=8&maxzoom=9")
    reader = limited_key(api, "reader", [scene])
    operator = limited_key(api, "operator", [scene])
    mine = api.get(scene_mbtiles["url"], headers=reader)
    assert mine.status_code == 200
    assert mine.content == exported(settings, scene_mbtiles).read_bytes()
    for headers in (reader, operator):
        r = api.get(other_export["url"], headers=headers)
        assert r.status_code == 404
        assert other not in r.text
    assert api.post(f"{EXPORT}/{other}?minzoom=8&maxzoom=9", headers=operator).status_code == 404
    # a name of another layer's export, under this layer: not this layer's (to the admin too)
    r = api.get(f"{EXPORT}/{scene}/files/{other_export['file']}")
    assert r.status_code == 404
    assert assert_error(r.json(), "not-found")["detail"] == {"parameter": "name"}
    for name in ("x.mbtiles", f"{other_export['file']}.tmp", f".{other_export['file']}", "%2e%2e"):
        assert api.get(f"{EXPORT}/{scene}/files/{name}").status_code == 404, name


def test_a_cancelled_export_leaves_no_file_under_its_final_name(
    api: TestClient, settings: Settings, rdb: redis.Redis, raster_dir: Path
) -> None:
    world = own_layer(settings, rdb, "single/world.rgb.tif", "export", "world.tif")
    r = api.post(f"{EXPORT}/{world}?archive=mbtiles&minzoom=0&maxzoom=8&async=1")
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    final = export_folder(settings.dirs.exports, world) / f"{job_id}.mbtiles"
    assert wait_running(api, job_id)["state"] == "running"
    deadline = time.monotonic() + 60
    while not any("Zoom" in line for line in job_lines(rdb, job_id)):
        assert time.monotonic() < deadline
        assert not final.exists()
        time.sleep(0.1)
    written = list(final.parent.iterdir())
    assert [p.name.endswith(".tmp") and job_id in p.name for p in written] == [True]
    assert not final.exists()
    assert api.delete(f"/api-user/jobs/{job_id}").status_code == 202  # stops at its next line
    assert wait_state(api, job_id, timeout=60)["state"] == "cancelled"
    assert not final.exists()
    assert list(final.parent.iterdir()) == []  # the temporary file is gone too


def test_cli_exports_a_pmtiles_archive(settings: Settings, scene: str, tmp_path: Path) -> None:
    out = tmp_path / "scene.pmtiles"
    done = run_mapsvc(
        settings,
        "export",
        scene,
        "--archive",
        "pmtiles",
        "--minzoom",
        "8",
        "--maxzoom",
        "10",
        "--out",
        str(out),
        check=True,
    )
    assert f"{out}:" in done.stdout
    assert "Zoom 9:" in done.stderr
    with out.open("rb") as f:
        header = Reader(MmapSource(f)).header()
    assert (header["min_zoom"], header["max_zoom"]) == (8, 9)
    assert header["tile_type"] == TileType.PNG
    assert [p.name for p in tmp_path.iterdir()] == ["scene.pmtiles"]


def test_a_box_too_thin_to_plan_is_422_before_any_work(api: TestClient, scene: str) -> None:
    """A box one hair high and the world wide: few tiles, but an edge of millions to walk."""
    r = api.post(f"/api-user/gis-layer-export/{scene}?bbox=-180,0,180,0.0001&maxzoom=21")
    assert r.status_code == 422, r.text
    assert "cannot all be planned" in assert_error(r.json(), "unprocessable")["message"]


def test_a_new_export_makes_room_among_the_old_ones(tmp_path: Path) -> None:
    """The oldest exports beyond KEEP_EXPORTS and partial files of dead exports go."""
    names = [f"{i:08x}-0000-0000-0000-000000000000.pmtiles" for i in range(KEEP_EXPORTS + 2)]
    for age, name in enumerate(names):  # names[0] the newest
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (time.time() - age * 60, time.time() - age * 60))
    dead, live = tmp_path / f".{names[0]}.a.tmp", tmp_path / f".{names[1]}.b.tmp"
    for path, age in ((dead, 2 * 24 * 3600), (live, 60)):
        path.write_bytes(b"x")
        os.utime(path, (time.time() - age, time.time() - age))
    _prune(tmp_path)
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {*names[: KEEP_EXPORTS - 1], live.name}


TRIANGLE = {
    "type": "Polygon",
    "coordinates": [[[-78.9, 23.6], [-76.6, 23.6], [-78.9, 25.5], [-78.9, 23.6]]],
}
#: about the Bahamas' bounds
BAHAMAS_BOX = (-79.5, 20.9, -72.5, 27.3)


@pytest.fixture(scope="module")
def region(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> str:
    """The scene again, as a layer of its own: its exports do not push the scene's out."""
    return own_layer(settings, rdb, RGB, "export", "region.tif")


def mbtiles_tiles(path: Path) -> set[tuple[int, int, int]]:
    """The tiles of an MBTiles file, their rows XYZ."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT zoom_level, tile_column, tile_row FROM tiles").fetchall()
    return {(z, x, (1 << z) - 1 - row) for z, x, row in rows}


def coverage_tiles(coverage: Coverage, minzoom: int, maxzoom: int) -> set[tuple[int, int, int]]:
    return {(t.z, t.x, t.y) for z in range(minzoom, maxzoom) for t in coverage.tiles(z)}


def test_an_export_takes_a_bbox_of_any_crs_and_its_tiles_are_the_plan(
    api: TestClient, settings: Settings, region: str
) -> None:
    to_3857 = Transformer.from_crs("EPSG:4326", "EPSG:3857", always_xy=True)
    (x0, x1), (y0, y1) = to_3857.transform([-78.4, -77.1], [24.0, 25.1])
    coverage = {"bbox": f"{x0},{y0},{x1},{y1}", "bbox_crs": "EPSG:3857", "buffer": "32"}
    zooms = {"minzoom": "8", "maxzoom": "11"}
    plan = api.get(
        f"/api-user/gis-layer-pretile/{region}", params={**coverage, **zooms, "dryrun": 1}
    )
    r = api.post(f"{EXPORT}/{region}", params={**coverage, **zooms})
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["tiles"] == result["plan"]["total"] == plan.json()["total"]
    expected = Coverage.of_bbox(coverage["bbox"], "EPSG:3857", 32)
    assert mbtiles_tiles(exported(settings, result)) == coverage_tiles(expected, 8, 11)
    assert result["bounds"] == pytest.approx(list(expected.bounds))


def test_an_export_takes_a_geojson_body_and_a_coverage_layer(
    api: TestClient, settings: Settings, region: str, vector_tables: str
) -> None:
    zooms = {"minzoom": "8", "maxzoom": "11", "archive": "pmtiles"}
    r = api.post(f"{EXPORT}/{region}", params=zooms, json=TRIANGLE)
    assert r.status_code == 200, r.text
    result = r.json()
    dry = api.post(
        f"/api-user/gis-layer-pretile/{region}?dryrun=1&minzoom=8&maxzoom=11", json=TRIANGLE
    )
    assert result["tiles"] == dry.json()["total"]
    with exported(settings, result).open("rb") as f:
        stored = {zxy for zxy, _ in all_tiles(MmapSource(f))}
    assert stored == coverage_tiles(Coverage.of_geojson(TRIANGLE), 8, 11)

    bahamas = {"coverage_layer": "public.countries", "where": "iso_a3 = 'BHS'"}
    r = api.post(f"{EXPORT}/{region}", params={**bahamas, "minzoom": "8", "maxzoom": "10"})
    assert r.status_code == 200, r.text
    result = r.json()
    dry = api.get(
        f"/api-user/gis-layer-pretile/{region}",
        params={**bahamas, "minzoom": "8", "maxzoom": "10", "dryrun": "1"},
    ).json()
    assert result["tiles"] == dry["total"] == sum(z["tiles"] for z in result["plan"]["zooms"])
    w, s, e, n = result["bounds"]
    assert -79.5 < w < e < -72.5  # the islands' bounds, not the scene's
    assert 20.5 < s < n < 27.5


def test_a_bad_coverage_is_400_and_nothing_is_written(
    api: TestClient, settings: Settings, region: str, vector_tables: str
) -> None:
    folder = export_folder(settings.dirs.exports, region)
    before = sorted(folder.iterdir()) if folder.is_dir() else []
    jobs = api.get("/api-user/jobs", params={"limit": 100}).json()["jobs"]
    for params, body, parameter in (
        ({"bbox": "-78,24,-77,25", "coverage_layer": "public.countries"}, None, "coverage_layer"),
        ({"bbox": "-78,24,-77,25"}, TRIANGLE, "body"),
        ({"where": "iso_a3 = 'BHS'"}, None, "where"),
        ({"bbox": "-77,24,-78,25"}, None, "bbox"),
        ({"bbox": "1,2,3,4", "bbox_crs": "EPSG:999999"}, None, "bbox_crs"),
        ({"coverage_layer": "public.test_points"}, None, "coverage_layer"),
        ({"buffer": "257"}, None, "buffer"),
        ({}, TRIANGLE | {"coordinates": [[[0, 0], [1, 1], [1, 0], [0, 1], [0, 0]]]}, "body"),
    ):
        r = (
            api.post(f"{EXPORT}/{region}", params=params, json=body)
            if body
            else api.post(f"{EXPORT}/{region}", params=params)
        )
        assert r.status_code == 400, (params, r.text)
        assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter
    r = api.post(
        f"{EXPORT}/{region}",
        params={"coverage_layer": "public.countries", "where": "iso_a3 = 'XXX'"},
    )
    assert r.status_code == 422
    assert "the coverage is empty" in assert_error(r.json(), "unprocessable")["message"]
    assert (sorted(folder.iterdir()) if folder.is_dir() else []) == before
    assert api.get("/api-user/jobs", params={"limit": 100}).json()["jobs"] == jobs  # none started


@pytest.mark.parametrize("mount", ["/api-user", "/api/v1"])
def test_a_caller_without_the_layer_gets_404_on_both_mounts(
    api: TestClient,
    settings: Settings,
    scene: str,
    scene_mbtiles: dict[str, Any],
    vector_tables: str,
    mount: str,
) -> None:
    others = limited_key(api, "operator", [POINTS_LAYER])  # neither the scene nor the countries
    mine = limited_key(api, "operator", [scene])  # the scene, not the countries
    export_path = f"{mount}/gis-layer-export/{scene}"
    file_path = f"{export_path}/files/{scene_mbtiles['file']}"
    for headers in (others,):
        for r in (
            api.post(export_path, params={"minzoom": 8, "maxzoom": 9}, headers=headers),
            api.post(
                export_path, params={"minzoom": 8, "maxzoom": 9}, json=TRIANGLE, headers=headers
            ),
            api.get(file_path, headers=headers),
        ):
            assert r.status_code == 404, r.text
            assert scene not in r.text
    hidden = {"coverage_layer": "public.countries", "where": "iso_a3 = 'BHS'", "maxzoom": "9"}
    r = api.post(export_path, params=hidden, headers=mine)
    assert r.status_code == 404, r.text
    assert "public.countries" not in r.text
    assert (
        api.get(file_path, headers=mine).content == exported(settings, scene_mbtiles).read_bytes()
    )


def test_an_export_to_the_bucket_without_one_is_503_before_any_work(
    api: TestClient, scene: str
) -> None:
    r = api.post(f"{EXPORT}/{scene}", params={"minzoom": 8, "maxzoom": 9, "isS3": 1})
    assert r.status_code == 503, r.text
    assert "object storage is not configured" in assert_error(r.json(), "unavailable")["message"]


def test_cli_export_takes_the_coverages_of_the_api(
    settings: Settings, region: str, vector_tables: str, tmp_path: Path
) -> None:
    shape = tmp_path / "triangle.geojson"
    shape.write_text(json.dumps({"type": "Feature", "properties": {}, "geometry": TRIANGLE}))
    out = tmp_path / "triangle.pmtiles"
    zooms = ("--minzoom", "8", "--maxzoom", "10")
    argv = ("export", region, "--archive", "pmtiles", *zooms, "--buffer", "16")
    run_mapsvc(settings, *argv, "--geojson", str(shape), "--out", str(out), check=True)
    with out.open("rb") as f:
        stored = {zxy for zxy, _ in all_tiles(MmapSource(f))}
    assert stored == coverage_tiles(Coverage.of_geojson(TRIANGLE, 16), 8, 10)

    out = tmp_path / "bahamas.mbtiles"
    layer = ("--coverage-layer", "public.countries", "--where", "iso_a3 = 'BHS'")
    run_mapsvc(settings, "export", region, *zooms, *layer, "--out", str(out), check=True)
    assert 0 < len(mbtiles_tiles(out)) < len(coverage_tiles(Coverage.box(BAHAMAS_BOX), 8, 10))

    for bad, words in (
        (("--where", "iso_a3 = 'BHS'"), "where filters coverage_layer"),
        (("--bbox", "1,2,3,4", "--bbox-crs", "EPSG:999999"), "unknown srs"),
        (("--bbox", "0,0,1,1", "--geojson", str(shape)), "not allowed with argument"),
        (("--geojson", str(tmp_path / "nosuch.geojson")), "--geojson"),
    ):
        done = run_mapsvc(settings, "export", region, *zooms, *bad, "--out", str(tmp_path / "x"))
        assert done.returncode == 2, done.stderr
        assert words in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bahamas.mbtiles",
        "triangle.geojson",
        "triangle.pmtiles",
    ]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"export_max_bytes": 20_000}, "MAPSVC_EXPORT_MAX_BYTES"),
        ({"min_free_disk_bytes": 2**60}, "the disk is almost full"),
    ],
)
def test_an_export_past_its_bytes_or_the_disk_stops_and_leaves_nothing(
    settings: Settings, scene: str, tmp_path: Path, change: dict[str, int], said: str
) -> None:
    """An export whose tiles pass ``MAPSVC_EXPORT_MAX_BYTES``, or whose disk has less free
    than ``MAPSVC_MIN_FREE_DISK_BYTES``, stops with an error saying so: no file is left."""
    limited = settings.model_copy(update={"tiles": settings.tiles.model_copy(update=change)})
    out = tmp_path / "scene.mbtiles"
    done = run_mapsvc(
        limited, "export", scene, "--minzoom", "8", "--maxzoom", "11", "--out", str(out)
    )
    assert done.returncode != 0
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # neither the archive nor its temporary file


def test_one_export_per_layer_at_a_time(
    api: TestClient, settings: Settings, rdb: redis.Redis, raster_dir: Path
) -> None:
    """A second export of a layer being exported is ``409`` naming the job; another layer's
    export goes on; once the first ended, the layer can be exported again."""
    world = own_layer(settings, rdb, "single/world.rgb.tif", "export", "world-once.tif")
    r = api.post(f"{EXPORT}/{world}?archive=mbtiles&minzoom=0&maxzoom=8&async=1")
    assert r.status_code == 202, r.text
    first = r.json()["id"]
    try:
        again = api.post(f"{EXPORT}/{world}?archive=pmtiles&minzoom=0&maxzoom=2")
        assert again.status_code == 409, again.text
        error = assert_error(again.json(), "conflict")
        assert error["detail"]["job_id"] == first
        assert first in error["message"]
    finally:
        assert api.delete(f"/api-user/jobs/{first}").status_code in (200, 202)
    assert wait_state(api, first, timeout=60)["state"] in ("cancelled", "succeeded")
    later = api.post(f"{EXPORT}/{world}?archive=pmtiles&minzoom=0&maxzoom=2")
    assert later.status_code == 200, later.text
    assert later.json()["tiles"] > 0
