"""Overviews and resampling of raster layers: built by the configuration job into the derived
folder only, drawn at the zooms they serve, and the layer's resampling from XML to pixels."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest
import rasterio
import redis
from rasterio.enums import Resampling
from starlette.testclient import TestClient

from shared.base.grid import TileAddress
from shared.errors import JobCancelledError
from shared.jobs import JobReporter, JobStore
from shared.mapnik_env import mapnik
from shared.raster.paths import encode_id
from shared.settings import Settings
from tests.checks import assert_error
from tests.jobs import job_lines
from tests.layers import RGB, configure_in_process, decode, reference, tile_url
from tests.rasters import write_raster

#: 2048 px over the z8 tile ZONE: its pixels are those of zoom 11
ZONE = TileAddress(8, 100, 100)
GRADIENT = "zoom/gradient.tif"
#: 16 x 16 pixels of distinct colours over a z10 tile of ZONE: a z12 tile shows 4 x 4 of them
PIXELS = "zoom/pixels.tif"
PIXELS_TILE = TileAddress(10, 400, 400)
OWN = "zoom/own.tif"
MOSAIC = "zoom-mosaic"


def gradient(size: int = 2048) -> np.ndarray:
    """Smooth waves in three bands, never 0 (the reference's nodata)."""
    x = np.arange(size, dtype=np.float32)
    y = x[:, None]
    bands = [
        128 + 90 * np.sin(x / 150 + b) * np.cos(y / (120 + 60 * b)) + 30 * np.sin((x + y) / 70)
        for b in range(3)
    ]
    return np.clip(np.stack(bands), 1, 255).astype(np.uint8)


def distinct_colours(side: int = 16) -> np.ndarray:
    """``side`` x ``side`` pixels, each of its own colour."""
    colours = np.random.default_rng(8).permutation(200**3)[: side * side]
    rgb = np.stack([colours // 40000 + 30, colours // 200 % 200 + 30, colours % 200 + 30])
    return rgb.reshape(3, side, side).astype(np.uint8)


@pytest.fixture(scope="module")
def scenes(raster_dir: Path) -> Path:
    """The rasters of this module, in their own folders of the raster root."""
    write_raster(
        raster_dir / GRADIENT,
        gradient(),
        ZONE.bounds_3857(),
        tiled=True,
        blockxsize=512,
        blockysize=512,
        compress="deflate",
    )
    write_raster(raster_dir / PIXELS, distinct_colours(), PIXELS_TILE.bounds_3857())
    shutil.copyfile(raster_dir / RGB, raster_dir / OWN)
    with rasterio.open(raster_dir / OWN, "r+") as ds:  # the user's own internal overviews
        ds.build_overviews([2, 4], Resampling.average)
    shutil.copytree(raster_dir / "bahamas-tiles", raster_dir / MOSAIC, dirs_exist_ok=True)
    return raster_dir


def files(folder: Path) -> dict[str, int]:
    """Every file below ``folder`` (hidden ones too) and its size."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def build_of(settings: Settings, rel: str) -> Path:
    """The build folder the layer's configuration uses now."""
    derived = settings.dirs.derived / encode_id(rel)
    return derived / json.loads((derived / "manifest.json").read_text())["build"]


def xml_of(settings: Settings, rel: str) -> ET.Element:
    return ET.parse(settings.dirs.mapnik / f"{encode_id(rel)}.xml").getroot()


def scaling(settings: Settings, rel: str) -> str | None:
    found = xml_of(settings, rel).find("Style/Rule/RasterSymbolizer")
    assert found is not None
    return found.get("scaling")


def drawn_layers(settings: Settings, rel: str, tile: TileAddress) -> list[str]:
    """The layers of the layer's map that Mapnik draws for ``tile``."""
    m = mapnik.Map(256, 256)
    mapnik.load_map(m, str(settings.dirs.mapnik / f"{encode_id(rel)}.xml"))
    m.zoom_to_box(mapnik.Box2d(*tile.bounds_3857()))
    return [layer.name for layer in m.layers if layer.visible(m.scale_denominator())]


def configured(client: TestClient, rdb: redis.Redis, rel: str, query: str = "") -> list[str]:
    """Configure ``rel`` through the API (a job on the worker); the lines of its job."""
    r = client.get(f"/api-user/gis-raster/{rel}{query}")
    assert r.status_code == 200, r.text
    return [re.sub(r" \d+ms$", "", line) for line in job_lines(rdb, r.headers["x-job-id"])]


@pytest.mark.worker
def test_overviews_are_built_into_the_derived_folder_only(
    client: TestClient,
    scenes: Path,
    rdb: redis.Redis,
    settings: Settings,
    worker: subprocess.Popen[bytes],
) -> None:
    before = files(scenes)

    lines = configured(client, rdb, GRADIENT, "?nocache=1")

    assert files(scenes) == before  # nothing new (no .ovr, no .aux.xml) among the rasters
    build = build_of(settings, GRADIENT)
    assert build.parent == settings.dirs.derived / encode_id(GRADIENT)
    assert sorted(p.name for p in build.glob("overview*")) == [
        "overview-2.tif",
        "overview-4.tif",
        "overview-8.tif",
        "overviews.vrt",
    ]
    with rasterio.open(build / "overviews.vrt") as vrt, rasterio.open(scenes / GRADIENT) as src:
        assert vrt.overviews(1) == [2, 4, 8]  # 2048 / 8 = 256 px: fits in a tile
        assert (vrt.crs, vrt.transform, vrt.shape) == (src.crs, src.transform, src.shape)
    step = lines.index("Overviews: of gradient.tif, bilinear")
    assert lines.index("VRT: not needed (one file)") < step < lines.index("Bands: Red,Green,Blue")
    levels = [line for line in lines if line.startswith("Overview ")]
    assert levels == [
        "Overview 1/3: 1/2 -> 1024x1024",
        "Overview 2/3: 1/4 -> 512x512",
        "Overview 3/3: 1/8 -> 256x256",
    ]
    times = r"Times: preview \d+ms, vrt \d+ms, overviews \d+ms, info \d+ms, xml \d+ms"
    assert any(re.fullmatch(times, line) for line in lines)
    bands = r"bilinear; overviews up to zoom 10 \(scale 1:\d+\), source above \(small raster\)"
    assert any(re.fullmatch(f"Raster scaling: {bands}", line) for line in lines)


@pytest.mark.worker
@pytest.mark.parametrize("z", [10, 9])
def test_a_tile_drawn_from_an_overview_matches_rasterio(
    client: TestClient,
    scenes: Path,
    rdb: redis.Redis,
    settings: Settings,
    worker: subprocess.Popen[bytes],
    z: int,
) -> None:
    configured(client, rdb, GRADIENT)
    n = 2 ** (z - ZONE.z)
    for tile in (
        TileAddress(z, ZONE.x * n, ZONE.y * n),
        TileAddress(z, ZONE.x * n + 1, ZONE.y * n),
    ):
        # z10 is exactly 2 source pixels a map pixel: the first scale of the overviews
        assert drawn_layers(settings, GRADIENT, tile) == ["overviews"]
        r = client.get(tile_url(encode_id(GRADIENT), tile.z, tile.x, tile.y, "?nocache=1"))
        image = decode(r.content)
        assert (image[3] == 255).all()
        error = np.abs(image[:3].astype(int) - reference(scenes / GRADIENT, tile).astype(int))
        assert error.mean() < 2, (tile, error.mean())
        assert np.percentile(error, 99) <= 8, tile


@pytest.mark.worker
def test_nearest_draws_only_source_colours_and_bilinear_blends_them(
    client: TestClient,
    scenes: Path,
    rdb: redis.Redis,
    settings: Settings,
    worker: subprocess.Popen[bytes],
) -> None:
    source = {tuple(c) for c in distinct_colours().reshape(3, -1).T}
    tile = TileAddress(12, PIXELS_TILE.x * 4 + 1, PIXELS_TILE.y * 4 + 2)  # 4 x 4 source pixels
    url = tile_url(encode_id(PIXELS), tile.z, tile.x, tile.y, "?nocache=1")

    def colours() -> set[tuple[int, ...]]:
        image = decode(client.get(url).content)
        assert (image[3] == 255).all()
        return {tuple(c) for c in image[:3].reshape(3, -1).T}

    lines = configured(client, rdb, PIXELS, "?resampling=nearest")
    assert scaling(settings, PIXELS) == "near"
    manifest = json.loads((settings.dirs.derived / encode_id(PIXELS) / "manifest.json").read_text())
    assert manifest["resampling"] == "nearest"
    assert "Raster scaling: nearest; source at every zoom (small raster)" in lines
    nearest = colours()
    assert len(nearest) == 16  # the 4 x 4 source pixels, each exactly
    assert nearest <= source
    first_build = build_of(settings, PIXELS)

    kept = configured(client, rdb, PIXELS, "")  # no resampling asked: the layer keeps its own
    assert "Preview: pixels.tif (up to date)" in kept
    assert "Raster scaling: nearest; source at every zoom (small raster)" in kept
    assert build_of(settings, PIXELS) == first_build
    assert scaling(settings, PIXELS) == "near"

    lines = configured(client, rdb, PIXELS, "?resampling=bilinear")
    assert not any("(up to date)" in line for line in lines)  # another resampling: rebuilt
    assert build_of(settings, PIXELS) != first_build
    assert scaling(settings, PIXELS) == "bilinear"
    blended = colours()
    assert len(blended - source) > 1000  # interpolated between the pixels' centres

    again = configured(client, rdb, PIXELS, "?resampling=bilinear")
    assert "Preview: pixels.tif (up to date)" in again  # the same choice: reused


@pytest.mark.parametrize("value", ["lanczos", "NEAREST", "near", "bilinear ", "1"])
def test_a_bad_resampling_is_400_and_changes_nothing(
    client: TestClient, scenes: Path, settings: Settings, value: str
) -> None:
    work = settings.work_dir / "map"
    before = {name: files(work / name) for name in ("raster", "derived", "mapnik")}

    r = client.get(f"/api-user/gis-raster/{GRADIENT}", params={"resampling": value, "nocache": 1})

    assert r.status_code == 400, r.text
    error = assert_error(r.json(), "invalid-input")
    assert error["detail"]["parameter"] == "resampling"
    assert "nearest, bilinear, cubic" in error["message"]
    assert "x-job-id" not in r.headers
    assert {name: files(work / name) for name in before} == before


@pytest.mark.worker
def test_a_source_with_its_own_overviews_is_drawn_as_it_is(
    client: TestClient,
    scenes: Path,
    rdb: redis.Redis,
    settings: Settings,
    worker: subprocess.Popen[bytes],
) -> None:
    lines = configured(client, rdb, OWN, "?nocache=1")

    assert "Overviews: own.tif has its own" in lines
    assert not list(build_of(settings, OWN).glob("overview*"))
    assert [layer.get("name") for layer in xml_of(settings, OWN).iter("Layer")] == ["raster"]


@pytest.mark.worker
def test_a_folder_gets_overviews_on_its_mosaic(
    client: TestClient,
    scenes: Path,
    rdb: redis.Redis,
    settings: Settings,
    worker: subprocess.Popen[bytes],
) -> None:
    lines = configured(client, rdb, MOSAIC, "?nocache=1&resampling=cubic")

    assert lines.index("VRT: 4 files -> mosaic.vrt") < lines.index(
        "Overviews: of mosaic.vrt, cubic"
    )
    vrt = build_of(settings, MOSAIC) / "overviews.vrt"
    assert '<SourceFilename relativeToVRT="1">../mosaic.vrt</SourceFilename>' in vrt.read_text()
    with rasterio.open(vrt) as ds, rasterio.open(scenes / RGB) as scene:
        assert ds.overviews(1) == [2, 4]  # 791 x 718 px, the whole scene
        assert ds.shape == scene.shape
    layers = [layer.get("name") for layer in xml_of(settings, MOSAIC).iter("Layer")]
    assert layers == ["overviews", "raster"]
    assert scaling(settings, MOSAIC) == "bicubic"


class _FailAt(JobReporter):
    """A reporter that raises ``error`` when a line starting with ``prefix`` is published."""

    def __init__(self, base: JobReporter, prefix: str, error: BaseException) -> None:
        super().__init__(base.store, base.job_id)
        self.prefix, self.error = prefix, error

    def line(self, text: str, *, progress: float | None = None, elapsed: bool = True) -> None:
        if text.startswith(self.prefix):
            raise self.error
        super().line(text, progress=progress, elapsed=elapsed)


@pytest.fixture
def reporter(settings: Settings, rdb: redis.Redis) -> JobReporter:
    store = JobStore(rdb, settings)
    job_id = str(uuid.uuid4())
    store.create(job_id, "raster-config", {})
    return JobReporter(store, job_id)


@pytest.mark.parametrize("prefix", ["Overviews: of", "Overview 2/3", "Overview 3/3"])
def test_a_rebuild_stopped_among_the_overviews_leaves_the_old_layer(
    scenes: Path, settings: Settings, reporter: JobReporter, prefix: str
) -> None:
    def configure(report: JobReporter) -> None:
        configure_in_process(settings, GRADIENT, report, refresh=True)

    configure(reporter)
    derived = settings.dirs.derived / encode_id(GRADIENT)
    before, xml = files(derived), (settings.dirs.mapnik / f"{encode_id(GRADIENT)}.xml").read_text()

    with pytest.raises(JobCancelledError):
        configure(_FailAt(reporter, prefix, JobCancelledError("the job was cancelled")))

    assert files(derived) == before  # the half-made build is gone, the old one kept
    assert (settings.dirs.mapnik / f"{encode_id(GRADIENT)}.xml").read_text() == xml
