"""Hostile requests on paths, layers and rendering: each is refused and nothing is lost."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from api.app import create_app
from shared.base.grid import RenderArea
from shared.errors import InvalidInputError, JobCancelledError, UnavailableError
from shared.jobs import JobReporter, JobStore
from shared.raster.layer import locate_layer
from shared.raster.paths import MAX_PATH_BYTES, decode_id, encode_id
from shared.settings import Settings
from shared.tiles.pool import RenderLimits, RenderPool
from shared.tiles.store import FileTileStore
from tests.checks import assert_error
from tests.conftest import admin_client
from tests.layers import configure_in_process, decode, tile_url

RGB = "single/RGB.byte.tif"
ROOT_RASTER = "root-scene.tif"
LAYER = "hostile/scene.tif"
#: a raster large enough to get a preview (its XML names its build folder)
BIG = "hostile/big.tif"
#: tiles of the Landsat scene (inside its footprint) rendered into the cache before each test
TILES = [(9, 145, 219), (9, 146, 219), (10, 290, 439), (10, 291, 439)]


def _reporter(settings: Settings, rdb: redis.Redis) -> JobReporter:
    store = JobStore(rdb, settings)
    job_id = str(uuid.uuid4())
    store.create(job_id, "raster-config", {})
    return JobReporter(store, job_id)


def _configure(settings: Settings, rdb: redis.Redis, rel: str, refresh: bool = False) -> str:
    result = configure_in_process(settings, rel, _reporter(settings, rdb), refresh=refresh)
    return str(result["layer"])


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture(scope="module")
def hostile_layers(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> list[str]:
    """A raster directly in the raster root, one in a folder; both configured."""
    shutil.copyfile(raster_dir / RGB, raster_dir / ROOT_RASTER)
    (raster_dir / "hostile").mkdir(exist_ok=True)
    shutil.copyfile(raster_dir / RGB, raster_dir / LAYER)
    subprocess.run(
        ["gdal_translate", "-q", "-outsize", "400%", "400%", "-co", "TILED=YES"]
        + ["-co", "COMPRESS=DEFLATE", str(raster_dir / RGB), str(raster_dir / BIG)],
        check=True,
    )
    return [_configure(settings, rdb, rel) for rel in (ROOT_RASTER, LAYER, BIG)]


@pytest.fixture(scope="module")
def tc(settings: Settings, hostile_layers: list[str]) -> Iterator[TestClient]:
    with admin_client(create_app(settings), raise_server_exceptions=False) as client:
        for layer in hostile_layers:
            for z, x, y in TILES:
                assert client.get(tile_url(layer, z, x, y)).status_code == 200
        yield client


@pytest.fixture
def snapshot(settings: Settings, tc: TestClient) -> Iterator[None]:
    """Every tile, derived file and map configuration is the same after the test."""
    work = settings.work_dir / "map"
    before = {name: _files(work / name) for name in ("rtile", "derived", "mapnik")}
    assert all(before.values())
    yield
    for name, files in before.items():
        after = _files(work / name)
        lost = set(files) - set(after)
        assert not lost, f"{name}: {sorted(lost)[:5]} lost"
        assert all(after[k] == v for k, v in files.items()), f"{name}: a file changed"
    assert tc.get("/api-user/health").status_code == 200


# -- a request touches only what it names ------------------------------------------------


@pytest.mark.parametrize("path", ["", "/", "//", "%2e", "%2e/", "%2e//%2e"])
@pytest.mark.usefixtures("snapshot")
def test_the_raster_root_is_not_a_layer(tc: TestClient, path: str) -> None:
    r = tc.get(f"/api-user/gis-raster/{path}")
    assert r.status_code == 400, r.text
    assert "raster folder" in assert_error(r.json(), "invalid-input")["message"]


@pytest.mark.parametrize(
    "spelling",
    [
        "./hostile/scene.tif",
        "hostile//scene.tif",
        "hostile/./scene.tif",
        "hostile/scene.tif/",
        "/hostile/scene.tif",
    ],
)
def test_spellings_of_a_path_name_one_layer(settings: Settings, spelling: str) -> None:
    where = locate_layer(settings.work_dir, spelling)
    assert where.rel_path == LAYER
    assert where.raster_id == encode_id(LAYER)


@pytest.mark.worker
@pytest.mark.usefixtures("snapshot")
def test_a_percent_encoded_dot_configures_the_same_layer(
    tc: TestClient, worker: subprocess.Popen[bytes]
) -> None:
    r = tc.get("/api-user/gis-raster/%2e/hostile/scene.tif")
    assert r.status_code == 200, r.text
    assert r.json()["layer"] == encode_id(LAYER)


@pytest.mark.parametrize(
    ("raster_id", "why"),
    [
        (encode_id("./" * 150 + "acc/mosaic"), "at most"),  # the 500 of the issue
        (encode_id("./single/RGB.byte.tif"), "normal form"),
        (encode_id("single//RGB.byte.tif"), "normal form"),
        (encode_id("a" * (MAX_PATH_BYTES + 1)), "at most"),
        (encode_id("../etc/passwd"), ".."),
        ("!!!", "raster id"),
        (base64.urlsafe_b64encode(b"\xff\xfe").decode(), "raster id"),
        ("A" * 5000, "at most"),
    ],
)
@pytest.mark.usefixtures("snapshot")
def test_bad_raster_ids_are_400(tc: TestClient, raster_id: str, why: str) -> None:
    for route in ("gis-raster-info", "gis-raster-stat", "gis-layer-compress"):
        r = tc.get(f"/api-user/{route}/{raster_id}")
        assert r.status_code == 400, (route, r.text)
        assert why in assert_error(r.json(), "invalid-input")["message"], route


@pytest.mark.parametrize(
    "query",
    [
        f"gis-raster?folder={'0' * 300}",
        f"gis-raster-info/{encode_id(LAYER)}?file={'0' * 300}",
        f"gis-raster?folder={'a/' * 3000}",
    ],
)
@pytest.mark.usefixtures("snapshot")
def test_names_too_long_for_the_file_system_are_400(tc: TestClient, query: str) -> None:
    r = tc.get(f"/api-user/{query}")
    assert r.status_code == 400, r.text
    assert "at most" in assert_error(r.json(), "invalid-input")["message"]


def test_an_id_decodes_only_to_a_normal_path() -> None:
    assert decode_id(encode_id(LAYER)) == LAYER
    with pytest.raises(InvalidInputError, match="normal form"):
        decode_id(encode_id(LAYER + "/"))


@pytest.mark.parametrize("unsafe", ["", ".", "..", "a/b", "../rtile", "x" * 1000])
@pytest.mark.usefixtures("snapshot")
def test_dropping_a_style_refuses_what_is_not_a_style(settings: Settings, unsafe: str) -> None:
    with pytest.raises(InvalidInputError):
        FileTileStore(settings.dirs.rtile).drop_style(unsafe)


# -- reconfiguration swaps in a finished build ---------------------------------------------


class _Probe(JobReporter):
    """A reporter that runs ``at_line`` when a line starting with ``prefix`` is published."""

    def __init__(self, base: JobReporter, prefix: str, at_line: object) -> None:
        super().__init__(base.store, base.job_id)
        self.prefix, self.at_line = prefix, at_line

    def line(self, text: str, *, progress: float | None = None, elapsed: bool = True) -> None:
        if text.startswith(self.prefix):
            self.at_line()  # type: ignore[operator]
        super().line(text, progress=progress, elapsed=elapsed)


def _xml(settings: Settings, layer: str) -> str:
    return (settings.dirs.mapnik / f"{layer}.xml").read_text()


def test_reconfiguring_serves_the_old_layer_until_the_swap(
    tc: TestClient, settings: Settings, rdb: redis.Redis
) -> None:
    layer = encode_id(BIG)
    z, x, y = TILES[2]
    old_xml = _xml(settings, layer)
    old_tile = decode(tc.get(tile_url(layer, z, x, y, "?nocache=1")).content)
    seen: list[tuple[int, str]] = []

    def during_build() -> None:  # the new previews are being made
        r = tc.get(tile_url(layer, z, x, y, "?nocache=1"))
        seen.append((r.status_code, _xml(settings, layer)))
        assert (decode(r.content) == old_tile).all()

    report = _Probe(_reporter(settings, rdb), "VRT:", during_build)
    configure_in_process(settings, BIG, report, refresh=True)
    assert seen == [(200, old_xml)]
    new_xml = _xml(settings, layer)
    assert new_xml != old_xml  # it points at the new build
    builds = sorted(p.name for p in (settings.dirs.derived / layer).glob("b-*"))
    assert len(builds) == 1  # the old build is gone
    assert builds[0] in new_xml
    assert (decode(tc.get(tile_url(layer, z, x, y, "?nocache=1")).content) == old_tile).all()


def test_a_failed_rebuild_leaves_the_old_layer_intact(
    tc: TestClient, settings: Settings, rdb: redis.Redis
) -> None:
    layer = encode_id(BIG)
    for z, x, y in TILES:
        assert tc.get(tile_url(layer, z, x, y)).status_code == 200
    derived = settings.dirs.derived / layer
    before = _files(derived)
    xml = _xml(settings, layer)
    tiles = _files(settings.dirs.rtile / layer)
    assert tiles

    def fail() -> None:
        raise JobCancelledError("the job was cancelled")

    report = _Probe(_reporter(settings, rdb), "VRT:", fail)
    with pytest.raises(JobCancelledError):
        configure_in_process(settings, BIG, report, refresh=True)
    assert _xml(settings, layer) == xml
    assert _files(derived) == before  # the half-made build is gone, the old one kept
    assert _files(settings.dirs.rtile / layer) == tiles
    assert tc.get(tile_url(layer, *TILES[0], "?nocache=1")).status_code == 200


@pytest.mark.worker
def test_compressing_x_tif_and_x_vrt_writes_two_outputs(
    client: TestClient, raster_dir: Path, worker: subprocess.Popen[bytes]
) -> None:
    folder = raster_dir / "twins"
    folder.mkdir(exist_ok=True)
    shutil.copyfile(raster_dir / RGB, folder / "x.tif")
    subprocess.run(["gdalbuildvrt", "-q", str(folder / "x.vrt"), str(folder / "x.tif")], check=True)
    r = client.get(f"/api-user/gis-layer-compress/{encode_id('twins')}")
    assert r.status_code == 200, r.text
    out = folder / "commpress"
    assert sorted(p.name for p in out.iterdir()) == ["x.tif", "x.vrt.tif"]
    assert {f["name"] for f in r.json()["files"]} == {"x.tif", "x.vrt"}


# -- bounded rendering ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("BBOX=nan,0,1,1", "finite"),
        ("BBOX=0,0,inf,1", "finite"),
        ("BBOX=-1e300,-1e300,1e300,1e300", "valid area"),
        ("BBOX=0,0,1,1&srs=EPSG:4326", "4326"),  # inside, but see the next line
        ("BBOX=0,0,200,1&srs=EPSG:4326", "valid area"),
        ("BBOX=0,0,1,1&srs=%2Bproj=merc", "authority code"),
        ("BBOX=0,0,1,1&crs=%2Binit=epsg:3857", "authority code"),
        ("BBOX=0,0,1,1&srs=EPSG:99999", "unknown srs"),
        ("BBOX=0,0,1,1&width=40960", "width"),
        ("lang=xx", "lang must be one of"),
        ("lang=../../x", "language tag"),
    ],
)
@pytest.mark.usefixtures("snapshot")
def test_bad_render_parameters_are_400(tc: TestClient, query: str, message: str) -> None:
    layer = encode_id(LAYER)
    r = tc.get(f"/api-user/rtile/{layer}/3/0/0.png?{query}")
    if query == "BBOX=0,0,1,1&srs=EPSG:4326":
        assert r.status_code == 200
        assert r.headers["content-type"] == "image/png"
        return
    assert r.status_code == 400, r.text
    assert message in assert_error(r.json(), "invalid-input")["message"]


def test_a_render_over_the_pixel_budget_is_400(settings: Settings) -> None:
    small = settings.model_copy(update={"render_max_pixels": 1_000_000})
    layer = encode_id(LAYER)
    with admin_client(create_app(small), raise_server_exceptions=False) as client:
        r = client.get(f"/api-user/rtile/{layer}/3/0/0.png?BBOX=0,0,1,1&width=1024&height=1024")
        assert r.status_code == 400, r.text
        assert "1000000 pixels" in assert_error(r.json(), "invalid-input")["message"]
        assert client.app.state.services.render_pool.pending == 0  # type: ignore[attr-defined]


@pytest.mark.usefixtures("snapshot")
def test_a_language_outside_the_set_makes_no_cache_folder(
    tc: TestClient, settings: Settings
) -> None:
    layer = encode_id(LAYER)
    r = tc.get(f"/api-user/rtile/{layer}/qq/9/145/219.png")
    assert r.status_code == 400
    assert_error(r.json(), "invalid-input")
    assert not (settings.dirs.rtile / layer / "qq").exists()


@pytest.mark.anyio
async def test_the_render_queue_is_bounded(settings: Settings, hostile_layers: list[str]) -> None:
    layer = hostile_layers[1]
    bbox = (-8700000.0, 2700000.0, -8500000.0, 2900000.0)
    pool = RenderPool(settings.dirs.mapnik, 1, limits=RenderLimits(3, 1, timeout_s=60))
    try:
        big = [pool.render(layer, "en", RenderArea(bbox, 2048, 2048)) for _ in range(2)]
        small = [pool.render(layer, "en", RenderArea(bbox, 256, 256)) for _ in range(3)]
        results = await asyncio.gather(*big, *small, return_exceptions=True)
    finally:
        pool.close()
    refused = [r for r in results if isinstance(r, UnavailableError)]
    # the two large renders (one at a time, the second waiting its turn) and a tile take the
    # three places; the other tiles are refused at once
    assert [isinstance(r, UnavailableError) for r in results] == [False, False, False, True, True]
    assert all(r.detail["retry_after_s"] == 1 for r in refused)
    assert (pool.pending, pool.pending_large) == (0, 0)


@pytest.mark.anyio
async def test_large_renders_wait_their_turn_within_the_timeout(
    settings: Settings, hostile_layers: list[str]
) -> None:
    """Eight large maps at once all get drawn, one after another (none refused); a wait for a
    turn past the timeout is 503, and frees its place."""
    layer = hostile_layers[1]
    bbox = (-8700000.0, 2700000.0, -8500000.0, 2900000.0)
    pool = RenderPool(settings.dirs.mapnik, 2, limits=RenderLimits(16, 1, timeout_s=120))
    try:
        maps = [pool.render(layer, "en", RenderArea(bbox, 1024, 768)) for _ in range(8)]
        results = await asyncio.gather(*maps, return_exceptions=True)
        assert not [r for r in results if isinstance(r, BaseException)]
        assert len({r.data for r in results if not isinstance(r, BaseException)}) == 1
        pool.limits = RenderLimits(16, 1, timeout_s=0.5)
        slow = [pool.render(layer, "en", RenderArea(bbox, 4096, 4096)) for _ in range(3)]
        late = await asyncio.gather(*slow, return_exceptions=True)
        for _ in range(600):  # a render given up on keeps its place until its process is done
            if not pool.pending:
                break
            await asyncio.sleep(0.1)
    finally:
        pool.close()
    waited = [r for r in late if isinstance(r, UnavailableError)]
    assert waited
    assert any("for its turn" in str(r) or "longer than" in str(r) for r in waited)
    assert (pool.pending, pool.pending_large) == (0, 0)


def test_render_processes_start_with_the_api_at_a_lower_priority(settings: Settings) -> None:
    warm = settings.model_copy(update={"render_warm_up": True, "render_processes": 2})
    with admin_client(create_app(warm)) as client:
        pool = client.app.state.services.render_pool  # type: ignore[attr-defined]
        deadline = time.monotonic() + 60
        while len(pool._executor._processes if pool._executor else ()) < 2:
            assert time.monotonic() < deadline, "the render processes did not start"
            time.sleep(0.1)
        pids = list(pool._executor._processes)
        deadline = time.monotonic() + 60
        while not all(os.getpriority(os.PRIO_PROCESS, pid) == 5 for pid in pids):
            assert time.monotonic() < deadline, "the render processes kept their priority"
            time.sleep(0.1)
        assert os.getpriority(os.PRIO_PROCESS, 0) == 0  # the API's own process does not


def test_a_slow_render_is_503_with_retry_after(
    settings: Settings, hostile_layers: list[str]
) -> None:
    slow = settings.model_copy(update={"render_timeout_s": 0.001})
    layer = hostile_layers[1]
    with admin_client(create_app(slow), raise_server_exceptions=False) as client:
        r = client.get(
            f"/api-user/rtile/{layer}/3/0/0.png"
            "?BBOX=-8700000,2700000,-8500000,2900000&width=2048&height=2048"
        )
        assert r.status_code == 503, r.text
        assert int(r.headers["retry-after"]) >= 1
        assert "longer than" in assert_error(r.json(), "unavailable")["message"]
        pool = client.app.state.services.render_pool  # type: ignore[attr-defined]
        deadline = time.monotonic() + 60
        while pool.pending and time.monotonic() < deadline:  # the render ends, its place frees
            time.sleep(0.1)
        assert pool.pending == 0
        assert client.get("/api-user/health").status_code == 200


# -- one parser per parameter ----------------------------------------------------------------


def _message(tc: TestClient, url: str) -> str:
    r = tc.get(url)
    assert r.status_code == 400, (url, r.text)
    return str(assert_error(r.json(), "invalid-input")["message"])


@pytest.mark.usefixtures("snapshot", "vector_tables")
def test_one_rule_per_parameter_everywhere(tc: TestClient) -> None:
    layer = encode_id(LAYER)
    langs = {
        _message(tc, url)
        for url in (
            f"/api-user/rtile/{layer}/xx/9/145/219.png",
            f"/api-user/rtile/{layer}/9/145/219.png?lang=xx",
            f"/api-user/gis-layer-pretile/{layer}?lang=xx",
            f"/api-user/gis-speed-test?layer={layer}&lang=xx",
            "/api-user/geocode?q=Kyiv&lang=xx",
            "/api-user/weather?x=30&y=50&lang=xx",
        )
    }
    assert len(langs) == 1
    assert langs.pop().startswith("lang must be one of")
    boxes = {
        _message(tc, url).split(" ", 1)[1]  # "<parameter> must be ..."
        for url in (
            f"/api-user/rtile/{layer}/9/145/219.png?BBOX=nan,0,1,1",
            "/api-user/geojson/public.countries?extent=nan,0,1,1",
            "/api-user/geocode?q=Kyiv&bbox=nan,0,1,1",
        )
    }
    assert boxes == {"must be four finite numbers with min < max"}


# -- hosts -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("snapshot")
def test_an_unknown_host_is_refused(tc: TestClient) -> None:
    r = tc.get("/api-user/health", headers={"Host": "evil.example"})
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-host")["detail"] == {"host": "evil.example"}
    assert r.headers["x-request-id"]
    assert tc.get("/api-user/health", headers={"Host": "localhost:8000"}).status_code == 200
