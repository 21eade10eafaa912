"""Raster endpoints on real rasters: listing, stat, configuration job, compression job."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import morecantile
import numpy as np
import pytest
import rasterio
import redis
from starlette.testclient import TestClient

from shared.mapnik_env import mapnik
from shared.raster.paths import decode_id, encode_id
from shared.settings import Settings
from tests.checks import assert_error, assert_same
from tests.jobs import job_lines
from tests.layers import decode
from tests.peers import TRANSLATE

RGB = "single/RGB.byte.tif"
TMS = morecantile.tms.get("WebMercatorQuad")


def strip_ms(line: str) -> str:
    return re.sub(r" \d+ms$", "", line)


def test_listing_of_the_root(client: TestClient, raster_dir: Path) -> None:
    r = client.get("/api-user/gis-raster")
    assert r.status_code == 200
    body = r.json()
    assert isinstance(body["time"], int)
    assert body["folder"] == ""
    rows = [(row["name"], row["type"], row["path"]) for row in body["rows"]]
    # other tests add folders of their own (pretile/, gone/) to the same work dir
    assert [row for row in rows if row[0] in {"bahamas-tiles", "broken", "single"}] == [
        ("bahamas-tiles", "dir", "bahamas-tiles"),
        ("broken", "dir", "broken"),
        ("single", "dir", "single"),
    ]
    assert not {"empty", "escape"} & {row[0] for row in rows}  # no rasters; leads outside
    for row in body["rows"]:
        assert set(row) == {"id", "name", "islayer", "filename", "path", "type"}
        assert decode_id(row["id"]) == row["path"]
        assert re.fullmatch(r"[A-Za-z0-9_-]+", row["id"])


def test_listing_of_a_folder_skips_non_rasters(client: TestClient, raster_dir: Path) -> None:
    body = client.get("/api-user/gis-raster?folder=single").json()
    assert body["folder"] == "single"
    assert [(r["name"], r["filename"], r["path"], r["type"]) for r in body["rows"]] == [
        ("RGB.byte", "RGB.byte.tif", "single/RGB.byte.tif", "file"),
        ("shade", "shade.tif", "single/shade.tif", "file"),
        ("world.rgb", "world.rgb.tif", "single/world.rgb.tif", "file"),
    ]


@pytest.mark.parametrize(
    ("folder", "status"),
    [("../", 400), ("/etc", 400), ("escape", 400), ("nope", 404), (RGB, 400), ("a/../../x", 400)],
)
def test_listing_refuses_bad_folders(
    client: TestClient, raster_dir: Path, folder: str, status: int
) -> None:
    r = client.get("/api-user/gis-raster", params={"folder": folder})
    assert r.status_code == status
    assert r.json()["error"]["code"] == ("not-found" if status == 404 else "invalid-input")


def test_stat_of_a_file(client: TestClient, raster_dir: Path) -> None:
    r = client.get(f"/api-user/gis-raster-stat/{encode_id(RGB)}")
    assert r.status_code == 200
    body = r.json()
    assert body["type"] == "file"
    stat = body["stat"]
    assert stat["size"] == (raster_dir / RGB).stat().st_size
    assert stat["count"] == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", stat["cdate"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", stat["edate"])
    (f,) = body["files"]
    assert f["name"] == "RGB.byte.tif"
    assert f["bands"] == "Red,Green,Blue"
    assert f["crs"] == "+proj=utm +zone=18 +datum=WGS84 +units=m +no_defs"
    assert f["rasterSize"] == [791, 718]
    assert f["err"] == ""
    assert isinstance(f["time"], int)
    assert f["extent"] == pytest.approx([-78.9586, 23.5650, -76.5749, 25.5509], abs=1e-3)
    x0, y0, x1, y1 = f["extent"]
    assert f["geom"] == {
        "type": "Polygon",
        "coordinates": [[[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]],
    }


def test_stat_of_gray_and_world_rasters(client: TestClient, raster_dir: Path) -> None:
    shade = client.get(f"/api-user/gis-raster-stat/{encode_id('single/shade.tif')}").json()
    assert shade["files"][0]["bands"] == "Gray"
    world = client.get(f"/api-user/gis-raster-stat/{encode_id('single/world.rgb.tif')}").json()
    assert world["files"][0]["extent"] == pytest.approx([-180, -90, 180, 90])


def test_stat_of_a_folder(client: TestClient, raster_dir: Path) -> None:
    body = client.get(f"/api-user/gis-raster-stat/{encode_id('bahamas-tiles')}").json()
    assert body["type"] == "dir"
    assert body["stat"]["size"] is None
    assert body["stat"]["count"] == 4
    assert body["files"] == [{"name": f"rgb{i}.tif"} for i in range(1, 5)]


def test_stat_reports_a_corrupt_file_in_err(client: TestClient, raster_dir: Path) -> None:
    folder = client.get(f"/api-user/gis-raster-stat/{encode_id('broken')}")
    assert folder.status_code == 200
    (entry,) = folder.json()["files"]
    assert entry["name"] == "corrupt.tif"
    assert "TIFFReadEncodedTile() failed" in entry["err"]
    file = client.get(f"/api-user/gis-raster-stat/{encode_id('broken/corrupt.tif')}").json()
    assert "TIFFReadEncodedTile() failed" in file["files"][0]["err"]


@pytest.mark.parametrize(
    ("raster_id", "status"),
    [
        ("!!notbase64", 400),
        (encode_id("../../etc/passwd"), 400),
        (encode_id("/etc/passwd"), 400),
        (encode_id("escape/passwd"), 400),
        (encode_id("single/nope.tif"), 404),
        (encode_id("empty"), 404),
    ],
)
def test_stat_refuses_bad_ids(
    client: TestClient, raster_dir: Path, raster_id: str, status: int
) -> None:
    r = client.get(f"/api-user/gis-raster-stat/{raster_id}")
    assert r.status_code == status
    assert_error(r.json(), "not-found" if status == 404 else "invalid-input")


def test_stat_cache_follows_file_changes(
    client: TestClient, raster_dir: Path, tmp_path: Path
) -> None:
    target = raster_dir / "single" / "changing.tif"
    shutil.copyfile(raster_dir / RGB, target)
    url = f"/api-user/gis-raster-stat/{encode_id('single/changing.tif')}"
    assert client.get(url).json()["files"][0]["rasterSize"] == [791, 718]
    shutil.copyfile(raster_dir / "single" / "world.rgb.tif", target)
    os.utime(target, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert client.get(url).json()["files"][0]["rasterSize"] == [512, 256]
    assert client.get(url + "?nocache=1").json()["files"][0]["rasterSize"] == [512, 256]
    target.unlink()


def render_tile(xml: Path, lon: float, lat: float, z: int) -> np.ndarray:
    m = mapnik.Map(256, 256)
    mapnik.load_map(m, str(xml))
    b = TMS.xy_bounds(TMS.tile(lon, lat, z))
    m.zoom_to_box(mapnik.Box2d(b.left, b.bottom, b.right, b.top))
    image = mapnik.Image(256, 256)
    mapnik.render(m, image)
    return np.frombuffer(image.to_string(), dtype=np.uint8).reshape(256, 256, 4)


CONFIG_STAGES = [
    "Start raster: ",
    "id: ",
    "proj4 (map): ",
    "Raster file check: ",
    "Start compression: ",
    "Preview: ",
    "VRT",
    "Bands: ",
    "srid: ",
    "proj4: ",
    "Compressed: ",
    '{"smallRaster":',
    '[{"name":',
    "Size: ",
    "Bounds: ",
    "Raster zoom: ",
    "Raster scaling: ",
    "Statistics: ",
    '{"statistics":',
    "Rendering: ",
    "XML size: ",
    "XML file: ",
    "Total time: ",
    "Times: preview ",
    "Finish:success",
]


def rgb_statistics(path: Path) -> list[dict[str, float]]:
    """Each band's statistics of the whole raster (it is smaller than the sample read), the
    black corners (nodata 0) left out."""
    with rasterio.open(path) as ds:
        data = ds.read(masked=True)
    found = []
    for band in data:
        valid = band.compressed().astype(float)
        p2, median, p98 = np.percentile(valid, [2, 50, 98])
        found.append(
            {
                "min": valid.min(),
                "max": valid.max(),
                "mean": float(f"{valid.mean():.6g}"),
                "std": float(f"{valid.std():.6g}"),
                "median": median,
                "percentile_2": p2,
                "percentile_98": p98,
                "valid_percent": round(100 * valid.size / band.size, 2),
            }
        )
    return found


def assert_stages(lines: list[str]) -> None:
    """Each stage of spec section 6 appears, in order (a stage may have several lines)."""
    position = 0
    for stage in CONFIG_STAGES:
        while position < len(lines) and not lines[position].startswith(stage):
            position += 1
        assert position < len(lines), f"stage {stage!r} missing or out of order in {lines}"


@pytest.mark.worker
def test_configure_a_file_layer(
    client: TestClient,
    raster_dir: Path,
    rdb: redis.Redis,
    settings: Settings,
    worker: subprocess.Popen[bytes],
) -> None:
    r = client.get(f"/api-user/gis-raster/{RGB}")
    assert r.status_code == 200, r.text
    body = r.json()
    layer = encode_id(RGB)
    assert body == {
        "id": "RGB.byte.tif",
        "layer": layer,
        "extent": pytest.approx([-78.9586, 23.5650, -76.5749, 25.5509], abs=1e-3),
        "url": f"/api-user/rtile/{layer}/en/{{z}}/{{x}}/{{y}}.png",
        "urls": {
            name: f"/api-user/rtile/{layer}/en/{{z}}/{{x}}/{{y}}{suffix}"
            for name, suffix in (
                ("png", ".png"),
                ("webp", ".webp"),
                ("jpg", ".jpg"),
                ("png@2x", "@2x.png"),
                ("webp@2x", "@2x.webp"),
                ("jpg@2x", "@2x.jpg"),
            )
        },
        "tilejson": f"/api-user/rtile/{layer}/tilejson.json?lang=en",
        "rendering": None,  # 8-bit RGB: Mapnik draws it as it always has
        "statistics": [
            {
                "band": band,
                "dtype": "uint8",
                **{key: pytest.approx(value) for key, value in stats.items()},
            }
            for band, stats in enumerate(rgb_statistics(raster_dir / RGB), start=1)
        ],
    }
    for name, template in body["urls"].items():  # each advertised template answers its format
        tile = client.get(template.format(z=8, x=72, y=110) + "?nocache=1")
        assert tile.status_code == 200, name
        media = {"png": "image/png", "webp": "image/webp", "jpg": "image/jpeg"}
        assert tile.headers["content-type"] == media[name.split("@")[0]]
        side = 512 if name.endswith("@2x") else 256
        assert decode(tile.content).shape[1:] == (side, side), name
    lines = job_lines(rdb, r.headers["x-job-id"])
    assert_stages(lines)
    job = client.get(f"/api-user/jobs/{r.headers['x-job-id']}").json()
    assert (job["kind"], job["layer"]) == ("raster-config", layer)  # the layer its request named
    assert "smallRaster" in lines[lines.index('{"smallRaster":true}')]
    descriptors = next(line for line in lines if line.startswith('[{"name":'))
    assert '"rasterSize":[791,718]' in descriptors
    for line in lines:
        if not line.startswith(("{", "[", "Finish")):
            assert re.search(r" \d+ms$", line), line
    xml = settings.dirs.mapnik / f"{layer}.xml"
    assert xml.is_file()
    rows = client.get("/api-user/gis-raster?folder=single").json()["rows"]
    assert {row["name"]: row["islayer"] for row in rows}["RGB.byte"] is True
    assert {row["name"]: row["islayer"] for row in rows}["shade"] is False
    pixels = render_tile(xml, -77.5, 24.5, 8)
    assert (pixels[..., 3] == 255).mean() > 0.4  # the scene covers a good part of the tile
    assert (pixels[..., 3] == 0).mean() > 0.2  # and the rest is transparent


@pytest.mark.worker
def test_configure_a_folder_layer_builds_a_valid_vrt(
    client: TestClient,
    raster_dir: Path,
    rdb: redis.Redis,
    settings: Settings,
    worker: subprocess.Popen[bytes],
) -> None:
    r = client.get("/api-user/gis-raster/bahamas-tiles")
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "bahamas-tiles"
    lines = [strip_ms(line) for line in job_lines(rdb, r.headers["x-job-id"])]
    assert_stages(lines)
    assert "VRT: 4 files -> mosaic.vrt" in lines
    assert "VRT preview: 4 previews -> mosaic-preview.vrt" in lines
    layer = encode_id("bahamas-tiles")
    vrt = settings.dirs.derived / layer / "mosaic.vrt"
    with rasterio.open(vrt) as mosaic, rasterio.open(raster_dir / RGB) as scene:
        assert mosaic.driver == "VRT"
        assert mosaic.bounds == scene.bounds
        assert np.array_equal(mosaic.read(), scene.read())
    gdal = subprocess.run(["gdalinfo", "-json", str(vrt)], capture_output=True, text=True)
    assert gdal.returncode == 0
    assert '"driverShortName":"VRT"' in gdal.stdout.replace(" ", "")
    xml = settings.dirs.mapnik / f"{layer}.xml"
    pixels = render_tile(xml, -77.5, 24.5, 8)
    assert (pixels[..., 3] == 255).mean() > 0.4


@pytest.mark.worker
def test_rerun_reuses_and_nocache_rebuilds(
    client: TestClient,
    raster_dir: Path,
    rdb: redis.Redis,
    settings: Settings,
    worker: subprocess.Popen[bytes],
) -> None:
    path = "single/world.rgb.tif"
    layer = encode_id(path)
    assert client.get(f"/api-user/gis-raster/{path}").status_code == 200
    tile = settings.dirs.rtile / layer / "en" / "0" / "0" / "0.png"
    tile.parent.mkdir(parents=True)
    tile.write_bytes(b"old tile")
    again = client.get(f"/api-user/gis-raster/{path}")
    assert any("(up to date)" in line for line in job_lines(rdb, again.headers["x-job-id"]))
    assert tile.exists()  # nothing changed: the cached tiles stay
    fresh = client.get(f"/api-user/gis-raster/{path}?nocache=1")
    assert fresh.status_code == 200
    assert not any("(up to date)" in line for line in job_lines(rdb, fresh.headers["x-job-id"]))
    assert not tile.exists()  # a rebuilt configuration drops its cached tiles


@pytest.mark.worker
def test_configure_mixed_crs_folder_is_refused(
    client: TestClient, raster_dir: Path, rdb: redis.Redis, worker: subprocess.Popen[bytes]
) -> None:
    r = client.get("/api-user/gis-raster/single")
    assert r.status_code == 422
    error = assert_error(r.json(), "unprocessable")
    assert "different coordinate systems" in error["message"]
    lines = job_lines(rdb, error["detail"]["job_id"])
    assert lines[-1].startswith("Finish:error: the files of this folder are in different")


@pytest.mark.worker
def test_configure_corrupt_raster_fails_with_gdal_message(
    client: TestClient, raster_dir: Path, rdb: redis.Redis, worker: subprocess.Popen[bytes]
) -> None:
    r = client.get("/api-user/gis-raster/broken/corrupt.tif")
    assert r.status_code == 422
    error = assert_error(r.json(), "unprocessable")
    assert "corrupt.tif" in error["message"]
    assert "TIFFReadEncodedTile" in error["message"]
    assert job_lines(rdb, error["detail"]["job_id"])[-1].startswith("Finish:error: corrupt.tif")


@pytest.mark.parametrize(
    ("path", "status"),
    [("nope.tif", 404), ("..%2Fx", 400), ("single/..%2F..%2Fx", 400), ("escape", 400)],
)
def test_configure_bad_paths(client: TestClient, raster_dir: Path, path: str, status: int) -> None:
    r = client.get(f"/api-user/gis-raster/{path}")
    assert r.status_code == status


@pytest.mark.worker
def test_compress_a_file_layer_like_gdal_translate(
    client: TestClient,
    raster_dir: Path,
    rdb: redis.Redis,
    tmp_path: Path,
    worker: subprocess.Popen[bytes],
) -> None:
    r = client.get(f"/api-user/gis-layer-compress/{encode_id(RGB)}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["folder"] == "single/commpress"
    (entry,) = body["files"]
    out = raster_dir / "single" / "commpress" / "RGB.byte.tif"
    assert entry["size"] == (raster_dir / RGB).stat().st_size
    assert entry["compressed"] == out.stat().st_size
    assert entry["ratio"] == pytest.approx(entry["compressed"] / entry["size"], abs=1e-4)
    lines = [strip_ms(line) for line in job_lines(rdb, r.headers["x-job-id"])]
    assert lines[0] == "Start compression: 1 file(s) -> commpress/"
    assert re.fullmatch(r"RGB\.byte\.tif: \d+ -> \d+ bytes, ratio 0\.\d{3}, \d+ ms", lines[1])
    assert lines[-1] == "Finish:success"
    reference = tmp_path / "ref.tif"
    subprocess.run([*TRANSLATE, str(raster_dir / RGB), str(reference)], check=True)
    with rasterio.open(out) as mine, rasterio.open(reference) as ref:
        assert mine.profile == ref.profile
        assert mine.profile["compress"] == "lzw"
        assert mine.profile["tiled"] is True
        assert [c.name for c in mine.colorinterp] == ["red", "green", "blue"]
        assert np.array_equal(mine.read(), ref.read())
        assert mine.tags(ns="IMAGE_STRUCTURE")["PREDICTOR"] == "2"
    with out.open("rb") as f:
        assert f.read(4) == b"II+\x00"  # BigTIFF


@pytest.mark.worker
def test_compress_a_gray_raster_fails_and_leaves_nothing(
    client: TestClient, raster_dir: Path, rdb: redis.Redis, worker: subprocess.Popen[bytes]
) -> None:
    r = client.get(f"/api-user/gis-layer-compress/{encode_id('single/shade.tif')}")
    assert r.status_code == 422
    error = assert_error(r.json(), "unprocessable")
    assert "shade.tif has 1 band(s)" in error["message"]
    lines = job_lines(rdb, error["detail"]["job_id"])
    assert lines[-1].startswith("Finish:error: 1 of 1 file(s) could not be compressed")
    out_dir = raster_dir / "single" / "commpress"
    assert not any(p.name.startswith(("shade", ".shade")) for p in out_dir.glob("*"))


@pytest.mark.worker
def test_compress_corrupt_layer_reports_on_its_stream(
    client: TestClient, raster_dir: Path, rdb: redis.Redis, worker: subprocess.Popen[bytes]
) -> None:
    r = client.get(f"/api-user/gis-layer-compress/{encode_id('broken')}")
    assert r.status_code == 422
    lines = job_lines(rdb, r.json()["error"]["detail"]["job_id"])
    assert any(line.startswith("corrupt.tif: failed: ") for line in lines)
    assert list((raster_dir / "broken" / "commpress").glob("*")) == []


def test_compress_unknown_layer_is_404(client: TestClient, raster_dir: Path) -> None:
    r = client.get(f"/api-user/gis-layer-compress/{encode_id('nope')}")
    assert r.status_code == 404


def gdalinfo_in(root: Path, rel: str) -> dict:
    """``gdalinfo -json`` run in the raster root on a relative path, as the API presents it."""
    done = subprocess.run(
        ["gdalinfo", "-json", rel], cwd=root, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    "rel",
    ["single/RGB.byte.tif", "single/shade.tif", "single/world.rgb.tif", "bahamas-tiles/rgb3.tif"],
)
def test_info_matches_gdalinfo(client: TestClient, raster_dir: Path, rel: str) -> None:
    r = client.get(f"/api-user/gis-raster-info/{encode_id(rel)}")
    assert r.status_code == 200, r.text
    assert_same(r.json(), gdalinfo_in(raster_dir, rel))
    assert str(raster_dir) not in r.text  # no server path


def test_info_of_a_file_of_a_folder_layer(client: TestClient, raster_dir: Path) -> None:
    r = client.get(
        f"/api-user/gis-raster-info/{encode_id('bahamas-tiles')}",
        params={"file": "bahamas-tiles/rgb2.tif"},
    )
    assert r.status_code == 200
    assert_same(r.json(), gdalinfo_in(raster_dir, "bahamas-tiles/rgb2.tif"))


def test_info_of_a_folder_layer_is_its_vrt(
    client: TestClient, raster_dir: Path, settings: Settings
) -> None:
    layer = encode_id("bahamas-tiles")
    body = client.get(f"/api-user/gis-raster-info/{layer}").json()
    assert body["driverShortName"] == "VRT"
    assert body["description"] == f"../derived/{layer}/mosaic.vrt"
    assert body["files"] == [f"../derived/{layer}/mosaic.vrt"] + [
        f"bahamas-tiles/rgb{i}.tif" for i in range(1, 5)
    ]
    assert body["size"] == [791, 718]
    reference = gdalinfo_in(raster_dir, body["description"])
    for key in ("size", "geoTransform", "cornerCoordinates", "wgs84Extent", "bands", "metadata"):
        assert_same(body[key], reference[key], key)


def test_info_cache_and_nocache(client: TestClient, raster_dir: Path) -> None:
    url = f"/api-user/gis-raster-info/{encode_id(RGB)}"
    first = client.get(url).json()
    assert client.get(url).json() == first
    assert client.get(url + "?nocache=1").json() == first


def test_info_of_the_corrupt_raster_is_422(client: TestClient, raster_dir: Path) -> None:
    r = client.get(f"/api-user/gis-raster-info/{encode_id('broken/corrupt.tif')}")
    assert r.status_code == 422
    error = assert_error(r.json(), "unprocessable")
    assert "TIFFReadEncodedTile() failed" in error["message"]
    assert error["message"].startswith("broken/corrupt.tif: ")
    assert error["detail"] == {"path": "broken/corrupt.tif"}
    assert str(raster_dir) not in r.text


@pytest.mark.parametrize(
    ("layer", "file", "status"),
    [
        (RGB, "../../etc/passwd", 400),
        (RGB, "/etc/passwd", 400),
        ("single", "single/notes.txt", 400),
        ("single", "single/nope.tif", 404),
        ("escape", "escape/hosts", 400),
        (RGB, "single/shade.tif", 404),  # a raster, but not one of the layer's
        ("bahamas-tiles", "single/RGB.byte.tif", 404),
    ],
)
def test_info_refuses_bad_files(
    client: TestClient, raster_dir: Path, layer: str, file: str, status: int
) -> None:
    r = client.get(f"/api-user/gis-raster-info/{encode_id(layer)}", params={"file": file})
    assert r.status_code == status
    assert r.json()["error"]["code"] == ("not-found" if status == 404 else "invalid-input")
