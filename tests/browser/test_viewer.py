"""The front door, the viewer and the API docs in a real browser: Debian's chromium, Playwright.

The API runs on a real uvicorn server (a Celery worker for the job tests); the pages are the
build of ``api/web`` (``make web``). Chromium is Debian's (``executable_path``; Playwright
downloads no browser), WebGL on SwiftShader. The map's pixels are read from its canvas
(``preserveDrawingBuffer``). With ``MAPSVC_SCREENSHOTS=<folder>`` (``make screenshots``: the
committed ``docs/images``) the tests save screenshots of what they checked.
"""

from __future__ import annotations

import base64
import math
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import numpy as np
import psycopg
import pytest
import redis
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    Request,
    Route,
    expect,
    sync_playwright,
)
from rio_tiler.colormap import cmap

from api.routes.web import DIST
from shared.base.grid import TileAddress
from shared.raster.paths import encode_id
from shared.settings import Settings
from tests.checks import ADMIN_KEY, AUTH, PYPROJECT_VERSION
from tests.conftest import pg, served, settings_env
from tests.layers import RGB, configure, decode, own_layer
from tests.rasters import write_raster

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: where screenshots go, when asked for (``make screenshots``)
SHOTS = os.environ.get("MAPSVC_SCREENSHOTS")
WORLD = "single/world.rgb.tif"
VIEW = (1280, 800)
#: how long a page may take to show what a step waits for (jobs are small here)
WAIT_MS = 20_000

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="needs Debian's chromium (deploy/services.sh --test-tools installs it)",
    ),
]


@dataclass
class Tab:
    """A page and what went wrong in it: console errors, uncaught exceptions."""

    page: Page
    base: str
    errors: list[str] = field(default_factory=list)

    def open(self, path: str) -> None:
        self.page.goto(f"{self.base}{path}")

    def clean(self) -> None:
        assert self.errors == [], "the page logged errors"


@pytest.fixture(scope="module")
def world(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> str:
    """The world raster, configured: its layer id."""
    return configure(settings, rdb, WORLD)


@pytest.fixture(scope="module")
def api(settings: Settings, world: str, vector_tables: str) -> Iterator[str]:
    if not (DIST / "viewer.html").is_file():
        pytest.fail(f"the web pages are not built in {DIST}: run `make web`")
    with served(settings) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"],
        )
        yield launched
        launched.close()


@pytest.fixture
def tab(browser: Browser, api: str) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": VIEW[0], "height": VIEW[1]})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    opened = Tab(page, api)

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            opened.errors.append(f"{message.text} ({message.location.get('url')})")

    page.on("console", console)
    page.on("pageerror", lambda error: opened.errors.append(f"uncaught: {error}"))
    yield opened
    context.close()


def shoot(page: Page, name: str) -> None:
    """Save a screenshot when asked for (``MAPSVC_SCREENSHOTS``)."""
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / name))


def sign_in(tab: Tab) -> None:
    tab.page.fill("#api-key", ADMIN_KEY)
    tab.page.click("#key-form button")
    expect(tab.page.locator("#signed-in")).to_contain_text("API key")


def canvas(page: Page) -> np.ndarray:
    """The map's pixels once it is idle, (rows, columns, RGB)."""
    expect(page.locator("#map")).to_have_attribute("data-state", "idle", timeout=WAIT_MS)
    url = page.evaluate("() => document.querySelector('#map canvas').toDataURL('image/png')")
    pixels = decode(base64.b64decode(url.split(",", 1)[1]))
    return np.moveaxis(pixels[:3], 0, -1).astype(int)


def row(page: Page, layer: str) -> str:
    return f'li[data-layer-id="{layer}"]'


def draw(page: Page, layer: str) -> None:
    """Tick a layer's box, and wait until the map has loaded its tiles."""
    page.check(f"{row(page, layer)} input[type=checkbox]")
    # a layer drawn with numpy (not 8-bit RGB) renders its first tiles in a few seconds
    expect(page.locator(row(page, layer))).to_have_attribute("data-drawn", "true", timeout=WAIT_MS)


def test_front_door_is_html_for_a_browser_and_json_for_clients(tab: Tab) -> None:
    tab.open("/")
    page = tab.page
    expect(page).to_have_title(f"mapsvc {PYPROJECT_VERSION}")
    links = {a.get_attribute("rel"): a.get_attribute("href") for a in page.locator("li a").all()}
    assert links["viewer"] == "/viewer"
    assert links["service-doc"] == "/docs"
    assert links["service-desc"] == "/api-user/openapi.json"
    assert links["ready"] == "/api-user/ready"
    assert links["flower"] == "http://127.0.0.1:5555/"
    page.click("a[rel=viewer]")
    expect(page.locator("#map canvas")).to_be_visible()
    tab.clean()

    for prefix in ("", "/api-user", "/api/v1"):
        answer = httpx.get(f"{tab.base}{prefix}/", headers={"Accept": "application/json"})
        assert answer.headers["content-type"] == "application/json"
        body = answer.json()
        assert (body["service"], body["version"]) == ("mapsvc", PYPROJECT_VERSION)
        rels = {link["rel"]: link["href"] for link in body["links"]}
        assert rels["service-desc"] == f"{prefix or '/api-user'}/openapi.json"
        assert rels["viewer"] == "/viewer"


def test_viewer_draws_a_raster_layer(tab: Tab, world: str) -> None:
    page = tab.page
    tab.open("/viewer#map=1/20/0")
    expect(page.locator("#raster-note")).to_have_text(
        "No public rasters here: sign in to see more."
    )
    sign_in(tab)
    page.click(f"{row(page, encode_id('single'))} button.open")
    expect(page.locator(row(page, world))).to_contain_text("world.rgb")
    before = canvas(page)
    draw(page, world)
    after = canvas(page)

    changed = (np.abs(after - before) > 8).any(axis=-1)
    assert changed.mean() > 0.5, f"the raster changed {changed.mean():.0%} of the map"
    colours = len(np.unique(after.reshape(-1, 3), axis=0))
    assert colours > 500, f"{colours} colours: not an image"  # the base has a handful

    page.click(f"{row(page, world)} button.name")  # its panel: statistics and metadata
    expect(page.locator("#raster-stat")).to_contain_text("file")
    expect(page.locator("#raster-info")).to_contain_text("GTiff")
    shoot(page, "viewer-raster.png")
    tab.clean()


def test_vector_layer_draws_and_a_click_shows_its_attributes(tab: Tab) -> None:
    page = tab.page
    tab.open("/viewer#map=3.5/22/79")  # India in the middle
    sign_in(tab)
    layer = "public.big_countries"
    expect(page.locator(row(page, layer))).to_contain_text("MULTIPOLYGON")
    before = canvas(page)
    draw(page, layer)
    after = canvas(page)
    assert (np.abs(after - before) > 8).any(axis=-1).mean() > 0.3, "the layer drew nothing"

    box = page.locator("#map").bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    feature = page.locator(f'#inspector .feature[data-layer="{layer}"]')
    expect(feature).to_contain_text("India")
    expect(feature).to_contain_text("IND")
    shoot(page, "viewer-vector.png")
    tab.clean()


def test_without_credentials_public_layers_only_then_a_login(
    tab: Tab, settings: Settings, world: str
) -> None:
    login, password = f"viewer-{uuid.uuid4().hex[:8]}", "correct horse battery"
    public = settings.model_copy(update={"public_layers": f"public.countries,{world}"})
    with served(public) as base:
        made = httpx.post(
            f"{base}/api-user/users",
            json={"login": login, "password": password, "role": "reader"},
            headers=AUTH,
        )
        assert made.status_code == 201, made.text
        tab.base = base
        page = tab.page
        tab.open("/viewer#map=2/20/10")
        vectors = page.locator("#vector-list li")
        expect(vectors).to_have_count(1)
        expect(vectors).to_contain_text("public.countries")
        # of the rasters, the public one and the folder that leads to it
        rasters = page.locator("#raster-list li")
        expect(rasters).to_have_count(1)
        page.click(f"{row(page, encode_id('single'))} button.open")
        expect(rasters).to_have_count(1)
        expect(page.locator(row(page, world))).to_contain_text("world.rgb")
        # the base is drawn from the public countries: land and sea
        assert len(np.unique(canvas(page).reshape(-1, 3), axis=0)) > 3

        page.fill("#login", login)  # POST /api/auth: a token for the session
        page.fill("#password", password)
        page.click("#login-form button")
        expect(page.locator("#signed-in")).to_have_text(login)
        expect(rasters).not_to_have_count(1)  # the folder's other rasters too
        assert vectors.count() > 1
        # a reader's token: the seeding runs are not asked (an operator's), the page says why
        expect(page.locator("#seeds-note")).to_have_text(
            "Seeding runs need an operator's credentials."
        )
        page.click("#sign-out")
        expect(vectors).to_have_count(1)
        expect(rasters).to_have_count(1)
        tab.clean()


def _job_lines(page: Page) -> list[str]:
    texts = page.locator("#job-lines li").all_inner_texts()
    return [re.sub(r" \d+ms$", "", text) for text in texts]


@pytest.mark.worker
@pytest.mark.usefixtures("worker")
def test_pretile_from_the_page_reaches_100_percent(tab: Tab, world: str) -> None:
    page = tab.page
    tab.open("/viewer#map=1/20/0")
    sign_in(tab)
    page.click(f"{row(page, encode_id('single'))} button.open")
    draw(page, world)
    page.click(f"{row(page, world)} button.name")
    page.fill("#pretile-minzoom", "0")
    page.fill("#pretile-maxzoom", "4")
    page.check("#pretile-nocache")
    expect(page.locator("#pretile-start")).to_be_disabled()  # the plan comes first
    page.click("#pretile-dryrun")
    expect(page.locator("#pretile-total")).to_have_text("85 tiles")  # 1 + 4 + 16 + 64
    expect(page.locator("#pretile-plan tbody tr")).to_have_count(4)
    page.click("#pretile-start")
    expect(page.locator("#job h2")).to_contain_text("Pre-tile world.rgb")

    expect(page.locator("#job-lines")).to_contain_text("Finish:success")
    expect(page.locator("#job-percent")).to_have_text("100%")
    assert page.locator("#job-progress").evaluate("bar => bar.value") == 100
    expect(page.locator("#job-state")).to_have_text("succeeded")
    lines = _job_lines(page)
    assert lines[0].startswith(f"Pretile {world}: zooms 0-3, 85 tiles")
    assert lines[-1] == "Finish:success"
    expect(page.locator("#job-result")).to_contain_text("rendered")
    shoot(page, "viewer-job.png")
    tab.clean()


@pytest.mark.worker
@pytest.mark.usefixtures("worker")
def test_a_reload_mid_job_resumes_its_progress(tab: Tab) -> None:
    steps = 16
    started = httpx.post(
        f"{tab.base}/api-user/diag/probe",
        params={"steps": steps, "delay_ms": 300, "async": 1},
        headers=AUTH,
    )
    assert started.status_code == 202, started.text
    job = started.json()["id"]
    page = tab.page
    tab.open("/viewer")
    sign_in(tab)
    page.click(f'button.job-link[data-job-id="{job}"]')
    expect(page.locator("#job-lines li").nth(4)).to_be_visible()  # the start and 4 steps
    assert page.locator("#job-progress").evaluate("bar => bar.value") < 100

    resumed: list[Request] = []
    page.on(
        "request", lambda r: resumed.append(r) if r.url.endswith(f"/jobs/{job}/events") else None
    )
    page.reload()
    expect(page.locator("#job-lines")).to_contain_text("Finish:success")
    expect(page.locator("#job-percent")).to_have_text("100%")

    lines = _job_lines(page)
    assert lines == [
        f"Probe start: {steps} steps, 300 ms apart",
        *(f"Probe step {i}/{steps}" for i in range(1, steps + 1)),
        "Finish:success",
    ]  # each line once: what was seen before the reload, then the rest
    assert len(resumed) == 1
    seen = resumed[0].headers.get("last-event-id")
    assert seen, "the stream was not resumed with Last-Event-ID"
    ids = page.locator("#job-lines li").evaluate_all("items => items.map(li => li.dataset.id)")
    assert seen in ids[4:-1]  # after the lines seen before the reload, before the end
    tab.clean()


@pytest.mark.worker
@pytest.mark.usefixtures("worker")
def test_a_raster_configured_from_the_page_then_its_speed_test_chart(
    tab: Tab, raster_dir: Path
) -> None:
    # a raster of its own: no other test's layer changes
    (raster_dir / "viewer").mkdir(exist_ok=True)
    shutil.copyfile(raster_dir / WORLD, raster_dir / "viewer" / "plain.tif")
    plain = encode_id("viewer/plain.tif")
    page = tab.page
    tab.open("/viewer#map=1/20/0")
    sign_in(tab)
    page.click(f"{row(page, encode_id('viewer'))} button.open")
    expect(page.locator(f"{row(page, plain)} input[type=checkbox]")).to_be_disabled()
    page.click(f"{row(page, plain)} button.name")
    page.click("#configure button[type=submit]")
    expect(page.locator("#job h2")).to_contain_text("Configure plain")
    expect(page.locator("#job-lines")).to_contain_text("Finish:success")
    expect(page.locator(f"{row(page, plain)} input[type=checkbox]")).to_be_enabled()
    draw(page, plain)

    page.click("#speed-test")  # the panel, opened again, offers the jobs of a layer
    expect(page.locator("#job h2")).to_contain_text("Speed test plain")
    expect(page.locator("#job-lines")).to_contain_text("Finish:success")
    zooms = sum(line.startswith("Zoom ") for line in _job_lines(page))  # a line per zoom
    assert zooms >= 3
    expect(page.locator("#job-result svg rect.bar.cold")).to_have_count(zooms)
    expect(page.locator("#job-result svg rect.bar.cached")).to_have_count(zooms)
    shoot(page, "viewer-speed-test.png")
    tab.clean()


#: the box a seeding run covers (on the Landsat scene) and its zooms: 8..12, a few hundred tiles
SEED_BBOX = (-78.5, 24.0, -77.0, 25.0)
SEED_ZOOMS = range(8, 13)
#: inside the box, outside it: a margin of pixels off its edges (its outline, the view's rounding)
EDGE_PX = 6


def _zoom_rows(page: Page, run: str) -> dict[int, tuple[int, int, int]]:
    """A run's progress per zoom as its row shows it: {zoom: (done, tiles, failed)}."""
    texts = page.locator(f'li.seed[data-seed-id="{run}"] table.seed-zooms tr').evaluate_all(
        "rows => rows.map(r => [r.dataset.zoom, r.querySelector('td.count').textContent])"
    )
    rows = {}
    for zoom, text in texts:
        found = re.fullmatch(r"(\d+)/(\d+)(?: (\d+) failed)?", text)
        assert found, text
        rows[int(zoom)] = (int(found[1]), int(found[2]), int(found[3] or 0))
    return rows


def _api_zooms(seed: dict[str, object]) -> dict[int, tuple[int, int, int]]:
    zooms: list[dict[str, int]] = seed["zooms"]  # type: ignore[assignment]
    return {z["zoom"]: (z["done"], z["tiles"], z["failed"]) for z in zooms}


def _box_on_canvas(page: Page, bbox: tuple[float, float, float, float]) -> np.ndarray:
    """The canvas's pixels inside ``bbox`` (EPSG:4326) at the view of the URL (``#map=``):
    a mask (rows, columns) of those ``EDGE_PX`` inside its edges, 1; ``EDGE_PX`` outside, 2."""
    hash_ = page.evaluate("location.hash")
    zoom, lat, lng = (float(v) for v in hash_.split("=", 1)[1].split("/")[:3])
    size = page.evaluate(
        "() => { const c = document.querySelector('#map canvas');"
        " return [c.width, c.height, devicePixelRatio]; }"
    )
    width, height, ratio = int(size[0]), int(size[1]), float(size[2])
    world = 512 * 2**zoom * ratio  # Web Mercator, in canvas pixels

    def x(lon: float) -> float:
        return (lon + 180) / 360 * world

    def y(la: float) -> float:
        return (1 - math.log(math.tan(math.pi / 4 + math.radians(la) / 2)) / math.pi) / 2 * world

    west, south, east, north = bbox
    left, right = x(west) - x(lng) + width / 2, x(east) - x(lng) + width / 2
    top, bottom = y(north) - y(lat) + height / 2, y(south) - y(lat) + height / 2
    cols, rows = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)

    def within(grown: float) -> np.ndarray:
        across: np.ndarray = (cols > left - grown) & (cols < right + grown)
        inside: np.ndarray = across & (rows > top - grown) & (rows < bottom + grown)
        return inside

    mask = np.zeros((height, width), dtype=int)
    mask[within(-EDGE_PX * ratio)] = 1
    mask[~within(EDGE_PX * ratio)] = 2
    return mask


def _coverage_coloured(pixels: np.ndarray) -> np.ndarray:
    """Pixels tinted by the coverage's magenta fill: green well under red and blue (the base's
    land, sea and borders are near grey or blue)."""
    red, green, blue = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    tinted: np.ndarray = (red - green > 40) & (blue - green > 40)
    return tinted


def _settle(client: httpx.Client, layer: str) -> dict[str, object]:
    """The layer's newest run once its counts stop moving (chunks in flight end after a cancel)."""
    before = None
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        seed: dict[str, object] = client.get("/seeds", params={"layer": layer}).json()["seeds"][0]
        counts = [seed[name] for name in ("state", "done", "remaining", "failed", "zooms")]
        if counts == before:
            return seed
        assert time.monotonic() < deadline, seed
        before = counts
        time.sleep(1)


@pytest.mark.worker
@pytest.mark.usefixtures("worker")
def test_a_seeding_run_its_progress_by_zoom_its_coverage_then_cancel_all_and_resume(
    tab: Tab, settings: Settings, rdb: redis.Redis, raster_dir: Path
) -> None:
    """The seeds panel lists a run going with /seeds' figures per zoom, draws its coverage on
    the map where its box is and nowhere else, and cancels every run of its layer; its resume
    is a new run, cancelled from its own row."""
    scene = own_layer(settings, rdb, RGB, "seeding", "seeded.tif")
    client = httpx.Client(base_url=f"{tab.base}/api-user", headers=AUTH, timeout=30)
    started = client.get(
        f"/gis-layer-pretile/{scene}",
        params={
            "minzoom": SEED_ZOOMS.start,
            "maxzoom": SEED_ZOOMS.stop,
            "bbox": ",".join(map(str, SEED_BBOX)),
            "max_tiles_per_s": 10,  # the run goes on while the page looks
            "async": 1,
        },
    )
    assert started.status_code == 202, started.text
    run = started.json()["id"]
    page = tab.page
    try:
        tab.open("/viewer#map=2/20/-60")
        sign_in(tab)
        item = page.locator(f'li.seed[data-seed-id="{run}"]')
        expect(item).to_have_attribute("data-state", "running")
        expect(item.locator(".seed-name")).to_have_text("seeding/seeded.tif")
        expect(item.locator(".seed-figures")).to_contain_text("tiles/s")
        expect(item.locator(".seed-figures")).to_contain_text("ETA")
        expect(item.locator("table.seed-zooms tr")).to_have_count(len(SEED_ZOOMS))
        shown = _zoom_rows(page, run)
        [seed] = client.get("/seeds", params={"layer": scene, "going": 1}).json()["seeds"]
        assert list(shown) == list(SEED_ZOOMS)
        assert seed["total"] > 200, seed
        for zoom, (done, tiles, failed) in _api_zooms(seed).items():
            # the page's figures are of an answer before this one: the tiles the same, done fewer
            assert (shown[zoom][1], shown[zoom][2]) == (tiles, failed), (zoom, shown, seed)
            assert shown[zoom][0] <= done
        figures = item.locator(".seed-figures").inner_text()
        assert re.match(rf"\d+/{seed['total']} tiles", figures), figures

        # picked: its coverage drawn where the box is, the map fitted to it
        item.locator("button.seed-name").click()
        expect(page).to_have_url(re.compile(r"#map=(?:[6-9]|1\d)\."))
        deadline = time.monotonic() + WAIT_MS / 1000
        while True:
            time.sleep(0.5)  # the URL's view is written after a pause
            picked, mask = canvas(page), _box_on_canvas(page, SEED_BBOX)
            tinted = _coverage_coloured(picked)
            if tinted[mask == 1].mean() > 0.99 or time.monotonic() > deadline:
                break
        assert tinted[mask == 1].mean() > 0.99, f"{tinted[mask == 1].mean():.1%} of the box"
        assert (mask == 1).sum() > 50_000  # the box is most of the map
        assert not tinted[mask == 2].any(), f"{tinted[mask == 2].sum()} pixels outside the box"
        shoot(page, "viewer-seeds.png")

        # picked again: the coverage is gone, the rest of the map as it was
        item.locator("button.seed-name").click()
        deadline = time.monotonic() + WAIT_MS / 1000
        while _coverage_coloured(dropped := canvas(page)).any():
            assert time.monotonic() < deadline, "the coverage stayed on the map"
            time.sleep(0.2)
        assert (np.abs(dropped - picked)[mask == 2] <= 2).all()

        # cancel all of the layer: the run ends cancelled, its row says so
        item.locator("button.seed-cancel-layer").click()
        job = client.get(f"/jobs/{run}").json()
        deadline = time.monotonic() + WAIT_MS / 1000
        while job["state"] != "cancelled":
            assert job["state"] == "running", job
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
            job = client.get(f"/jobs/{run}").json()
        expect(item).to_have_attribute("data-state", "cancelled")
        ended = _settle(client, scene)
        assert ended["id"] == run
        page.click("#seeds-refresh")
        expect(item.locator(".seed-figures")).to_contain_text(
            f"{ended['done']}/{ended['total']} tiles"
        )
        assert _zoom_rows(page, run) == _api_zooms(ended)
        assert ended["done"] < ended["total"]  # type: ignore[operator]

        # resumed from its row: a new run going on from it, cancelled from its own row
        item.locator("button.seed-resume").click()
        expect(page.locator("#job h2")).to_contain_text("Resume seeding/seeded.tif")
        [resumed] = client.get("/seeds", params={"layer": scene, "going": 1}).json()["seeds"]
        assert resumed["id"] != run
        again = page.locator(f'li.seed[data-seed-id="{resumed["id"]}"]')
        expect(again).to_contain_text(f"resumes {run[:8]}")
        again.locator("button.seed-cancel").click()
        expect(again).to_have_attribute("data-state", "cancelled")
        assert client.get(f"/jobs/{resumed['id']}").json()["state"] == "cancelled"
        assert _settle(client, scene)["resumed_of"] == run
        tab.clean()
    finally:
        client.delete("/seeds", params={"layer": scene})
        client.close()


def test_api_docs_page_lists_the_routes(tab: Tab) -> None:
    document = httpx.get(f"{tab.base}/api-user/openapi.json").json()
    documented = {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in ("get", "post", "put", "delete", "patch")
    }
    page = tab.page
    tab.open("/docs")
    operations = page.locator(".opblock")
    expect(operations).to_have_count(len(documented))
    shown = {
        (
            block.locator(".opblock-summary-method").inner_text().strip(),
            block.locator(".opblock-summary-path").get_attribute("data-path"),
        )
        for block in operations.all()
    }
    assert shown == documented
    shoot(page, "api-docs.png")
    tab.clean()


def _unique_colours(page: Page) -> int:
    return len(np.unique(canvas(page).reshape(-1, 3), axis=0))


@pytest.mark.worker
@pytest.mark.usefixtures("worker")
def test_a_pmtiles_export_is_drawn_from_its_url_with_range_requests(tab: Tab, world: str) -> None:
    """MapLibre with the `pmtiles` protocol draws the export straight from its download URL,
    pixel for pixel the layer's tiles, asking the archive by HTTP range requests."""
    started = httpx.post(
        f"{tab.base}/api-user/gis-layer-export/{world}",
        params={"archive": "pmtiles", "minzoom": 0, "maxzoom": 4, "async": 1},
        headers=AUTH,
    )
    assert started.status_code == 202, started.text
    job = started.json()["id"]
    deadline = time.monotonic() + WAIT_MS / 1000 * 3
    while (state := httpx.get(f"{tab.base}/api-user/jobs/{job}", headers=AUTH).json())[
        "state"
    ] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    result = state["result"]
    assert (state["state"], result["tiles"]) == ("succeeded", 85), state  # 1 + 4 + 16 + 64
    url = result["url"]

    page = tab.page
    answers: list[tuple[int, str | None]] = []
    page.on(
        "response",
        lambda r: (
            answers.append((r.status, r.request.headers.get("range")))
            if urlsplit(r.url).path == url
            else None
        ),
    )
    tab.open("/viewer#map=2/20/0")
    sign_in(tab)
    # the job's result offers the archive: drawn, the map fitted to its bounds
    page.click(f'button.job-link[data-job-id="{job}"]')
    page.click("#export-show")
    expect(page.locator("#status")).to_contain_text("zooms 0-3")
    assert answers, "the archive was not read"
    assert {status for status, _ in answers} == {206}, answers  # parts, never the whole file
    assert all(asked and asked.startswith("bytes=") for _, asked in answers)

    # ?pmtiles=<url> at a fixed view: the archive alone, then the layer's own tiles over it
    answers.clear()
    tab.open(f"/viewer?pmtiles={url}#map=2/20/0")
    expect(page.locator("#status")).to_contain_text("zooms 0-3")
    deadline = time.monotonic() + WAIT_MS / 1000
    while _unique_colours(page) < 500:  # the base has a handful: wait for the image
        assert time.monotonic() < deadline, "the archive drew nothing"
        time.sleep(0.2)
    archive = canvas(page)
    assert answers, "the archive was not read"
    assert {status for status, _ in answers} == {206}, answers
    page.click(f"{row(page, encode_id('single'))} button.open")
    draw(page, world)
    tiles = canvas(page)
    same = (np.abs(archive - tiles) <= 3).all(axis=-1)
    assert same.mean() > 0.99, f"{same.mean():.1%} of the map is the layer's own pixels"
    shoot(page, "viewer-pmtiles.png")
    tab.clean()


# -- the rendering of a raster layer: bands, stretch, colour map, legend, 3D terrain ------------

#: two synthetic rasters (512 px each): a scene over the Alps' north (a z7 tile, 156 km), a DEM
#: over the Julian Alps (a z9 tile, 39 km: its hill stands out in 3D)
SCENE_TILE = TileAddress(7, 68, 45)
DEM_TILE = TileAddress(9, 276, 180)
RENDER_FOLDER = "viewer-rendering"
SCENE = f"{RENDER_FOLDER}/scene-u16.tif"
DEM = f"{RENDER_FOLDER}/dem-f32.tif"
RENDER_SIDE = 512


def _waves(phase: float) -> np.ndarray:
    x = np.arange(RENDER_SIDE, dtype=np.float64)
    y = x[:, None]
    return np.sin(x / 45 + phase) * np.cos(y / (35 + 10 * phase)) + 0.4 * np.sin((x + y) / 20)


@pytest.fixture(scope="module")
def rendered(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> tuple[str, str]:
    """A 4-band UInt16 scene (0 is nodata) and a Float32 DEM (a hill of 300..2300 m, a nodata
    corner), configured: their layer ids."""
    scene = np.stack([(8000 + 3000 * _waves(b)).astype(np.uint16) for b in range(4)])
    scene[:, :32, :32] = 0
    tiled: dict[str, Any] = {"tiled": True, "blockxsize": 256, "blockysize": 256}
    write_raster(raster_dir / SCENE, scene, SCENE_TILE.bounds_3857(), nodata=0, **tiled)
    x = np.arange(RENDER_SIDE, dtype=np.float64)
    y = x[:, None]
    middle, spread = RENDER_SIDE / 2, RENDER_SIDE / 5
    hill = 2000 * np.exp(-((x - middle) ** 2 + (y - middle) ** 2) / (2 * spread**2))
    dem = (300 + hill + 40 * _waves(0.3)).astype(np.float32)
    dem[:16, :16] = -9999.0
    write_raster(raster_dir / DEM, dem[np.newaxis], DEM_TILE.bounds_3857(), nodata=-9999.0, **tiled)
    return configure(settings, rdb, SCENE), configure(settings, rdb, DEM)


def _tile_view(tile: TileAddress) -> str:
    """The viewer's URL hash that centres ``tile`` at its own zoom (512 px on the map)."""
    west, south, east, north = tile.bounds_4326()
    y_mid = sum(tile.bounds_3857()[1::2]) / 2
    lat = math.degrees(math.atan(math.sinh(y_mid / 6378137)))
    return f"#map={tile.z}/{lat:.6f}/{(west + east) / 2:.6f}"


def _open_rendering(tab: Tab, layer: str, tile: TileAddress) -> Page:
    """The viewer at ``tile``, signed in, the panel of ``layer`` (in the rendering folder)."""
    page = tab.page
    tab.open(f"/viewer{_tile_view(tile)}")
    sign_in(tab)
    page.click(f"{row(page, encode_id(RENDER_FOLDER))} button.open")
    page.click(f"{row(page, layer)} button.name")
    expect(page.locator("#rendering")).to_be_visible(timeout=WAIT_MS)
    return page


def _legend_landed(tab: Tab, layer: str) -> bool:
    """Whether the server has the legend routes (another change brings them)."""
    answer = httpx.get(f"{tab.base}/api-user/rtile/{layer}/legend.json", headers=AUTH)
    assert answer.status_code in (200, 404), answer.text
    return answer.status_code == 200


def _clean_but_a_missing_legend(tab: Tab, landed: bool) -> None:
    """No console error; without the legend routes, but for the one 404 of each page load
    that taught the viewer they are not there (it asks them no more)."""
    if not landed:
        missing = [e for e in tab.errors if "404" in e and "/legend." in e]
        assert len(missing) <= 2, missing  # legend.json and legend.png, asked together once
        tab.errors = [e for e in tab.errors if e not in missing]
    tab.clean()


@pytest.mark.worker
@pytest.mark.usefixtures("worker")
def test_a_16_bit_scene_drawn_with_a_colour_map_its_legend_then_saved(
    tab: Tab, rendered: tuple[str, str]
) -> None:
    """The rendering form: one band through viridis, applied from the TileJSON asked with the
    parameters (its tiles carry them), the map's pixels viridis's; the legend under it (or
    hidden while the server has no legend routes); saved as the layer's own by the job."""
    scene, _ = rendered
    landed = _legend_landed(tab, scene)
    page = _open_rendering(tab, scene, SCENE_TILE)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if f"/rtile/{scene}/" in r.url else None)
    # prefilled from the layer's own rendering: red, green, blue by colour interpretation or
    # the first three bands, each stretched by its statistics' 2-98 %
    tilejson = httpx.get(f"{tab.base}/api-user/rtile/{scene}/tilejson.json", headers=AUTH)
    stats = tilejson.json()["statistics"]
    assert [s["dtype"] for s in stats] == ["uint16"] * 4
    expect(page.locator("#rendering-band-1 option")).to_have_count(4)
    expect(page.locator("#rendering .stretch-row")).to_have_count(3)
    expect(page.locator("#terrain-toggle")).to_have_count(0)  # four bands: not a DEM
    draw(page, scene)
    before = canvas(page)
    mask = _box_on_canvas(page, SCENE_TILE.bounds_4326())
    inside = mask == 1
    assert inside.sum() > 100_000  # the scene is most of the map

    page.select_option("#rendering-band-1", "4")
    page.select_option("#rendering-band-2", "")
    page.select_option("#rendering-band-3", "")
    expect(page.locator("#rendering .stretch-row")).to_have_count(1)
    p2, p98 = stats[3]["percentile_2"], stats[3]["percentile_98"]
    assert float(page.input_value("#rendering-min-1")) == pytest.approx(p2, rel=1e-5)
    assert float(page.input_value("#rendering-max-1")) == pytest.approx(p98, rel=1e-5)
    expect(page.locator("#rendering-colormap")).to_be_enabled()  # one band
    page.select_option("#rendering-colormap", "viridis")
    page.click("#rendering-apply")
    expect(page.locator("#status")).to_contain_text("drawn with")

    viridis = np.array([cmap.get("viridis")[i][:3] for i in range(256)], dtype=int)
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        after = canvas(page)
        colours, counts = np.unique(after[inside], axis=0, return_counts=True)
        near = np.abs(colours[:, None, :] - viridis[None]).max(axis=-1).min(axis=1) <= 12
        share = counts[near].sum() / counts.sum()
        if share > 0.95 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert share > 0.95, f"{share:.1%} of the scene is viridis's colours"
    changed = (np.abs(after - before) > 8).any(axis=-1)
    assert changed[inside].mean() > 0.8, f"{changed[inside].mean():.1%} of the scene changed"
    drawn = after[inside]
    assert ((drawn >= 245).all(axis=-1)).mean() < 0.01, "white"
    assert ((drawn <= 10).all(axis=-1)).mean() < 0.01, "black"
    assert len(colours) > 50, f"{len(colours)} colours: not a stretch"
    assert not changed[mask == 2].any(), "the map changed outside the scene"
    # the tiles were asked at the template of the TileJSON asked with the parameters
    tiles = [parse_qs(urlsplit(u).query) for u in asked if re.search(r"/\d+/\d+/\d+\.png", u)]
    assert any(q.get("colormap_name") == ["viridis"] and q.get("bidx") == ["4"] for q in tiles)
    assert any(q.get("rescale") for q in tiles)

    legend = page.locator("#rendering-legend")
    if landed:
        expect(legend).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#legend-range")).to_contain_text("–")
        assert page.locator("#legend-image").evaluate("img => img.complete && img.naturalWidth") > 0
    else:
        expect(legend).to_be_hidden()
    shoot(page, "viewer-rendering.png")

    # saved as the layer's own rendering: the configuration job, its progress in the job panel
    page.click("#rendering-save")
    title = page.locator("#job h2")
    expect(title).to_contain_text("Save the rendering of scene-u16", timeout=WAIT_MS)
    expect(page.locator("#job-lines")).to_contain_text("Finish:success", timeout=WAIT_MS)
    expect(page.locator("#job-state")).to_have_text("succeeded")
    own = httpx.get(f"{tab.base}/api-user/rtile/{scene}/tilejson.json", headers=AUTH).json()
    assert own["rendering"]["bidx"] == ["4"]
    assert own["rendering"]["colormap_name"] == "viridis"
    # the panel, opened again, shows it
    expect(page.locator("#rendering-colormap")).to_have_value("viridis", timeout=WAIT_MS)
    expect(page.locator("#rendering .stretch-row")).to_have_count(1)
    assert page.locator("#status").get_attribute("data-kind") != "error"
    _clean_but_a_missing_legend(tab, landed)


def _coloured(pixels: np.ndarray) -> bool:
    """Whether a third of the map has colours (not grays)."""
    red, green, blue = (pixels[..., i] for i in range(3))
    share: float = ((np.abs(red - green) > 20) | (np.abs(green - blue) > 20)).mean()
    return share > 0.3


def test_a_float_dem_as_3d_terrain(tab: Tab, rendered: tuple[str, str]) -> None:
    """A DEM (one Float32 band), drawn through a colour map, offers 3D terrain: its
    terrain-RGB tiles as a raster-dem source, the map's terrain (``getTerrain()``, which the
    map's element reports) and a hillshade, with no error; off again, no terrain."""
    _, dem = rendered
    landed = _legend_landed(tab, dem)
    page = _open_rendering(tab, dem, DEM_TILE)
    answers: list[tuple[int, str]] = []
    page.on(
        "response",
        lambda r: answers.append((r.status, r.url)) if "algorithm=terrainrgb" in r.url else None,
    )
    draw(page, dem)
    expect(page.locator("#rendering .stretch-row")).to_have_count(1)
    page.select_option("#rendering-colormap", "terrain")  # drawn in colours, then as relief
    page.click("#rendering-apply")
    deadline = time.monotonic() + WAIT_MS / 1000
    while not _coloured(flat := canvas(page)):
        assert time.monotonic() < deadline, "the colour map was not drawn"
        time.sleep(0.2)
    terrain = page.locator("#terrain-toggle")
    expect(terrain).not_to_be_checked()
    terrain.check()
    expect(page.locator("#map")).to_have_attribute("data-terrain", "terrain", timeout=WAIT_MS)
    expect(page).to_have_url(re.compile(r"#map=[\d.]+/[-\d.]+/[-\d.]+/0/50$"))  # tilted
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        relief = canvas(page)
        tiles = [url for status, url in answers if re.search(r"/\d+/\d+/\d+\.png", url)]
        if tiles or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert tiles, "no terrain-RGB tile was asked"
    assert {status for status, _ in answers} == {200}, answers
    assert all("resampling=bilinear" in url for url in tiles)
    assert (np.abs(relief - flat) > 8).any(axis=-1).mean() > 0.2, "the terrain changed nothing"
    assert len(np.unique(relief.reshape(-1, 3), axis=0)) > 100  # shaded, not one colour
    expect(page.locator("#rendering-error")).to_have_text("")
    assert page.locator("#status").get_attribute("data-kind") != "error"
    shoot(page, "viewer-terrain.png")

    terrain.uncheck()
    expect(page.locator("#map")).to_have_attribute("data-terrain", "")
    expect(page).to_have_url(re.compile(r"#map=[\d.]+/[-\d.]+/[-\d.]+$"))  # level again
    canvas(page)
    _clean_but_a_missing_legend(tab, landed)


def test_a_colour_map_by_name_draws_the_layer_and_no_legend_route_hides_the_legend(
    tab: Tab, rendered: tuple[str, str]
) -> None:
    """A colour map named in the free text; a name the server does not know is its 400, shown
    in the form; Apply draws a layer that was not drawn. A server without the legend routes
    (404) shows no legend, and is not asked them again on the page."""
    _, dem = rendered
    page = tab.page
    legends: list[str] = []

    def no_legend(route: Route) -> None:
        legends.append(route.request.url)
        body = {"error": {"code": "not-found", "message": "Not Found", "detail": {}}}
        route.fulfill(status=404, json=body)

    page.route(re.compile(r"/rtile/[^/]+/legend\.(json|png)"), no_legend)
    page = _open_rendering(tab, dem, DEM_TILE)
    expect(page.locator(f"{row(page, dem)} input[type=checkbox]")).not_to_be_checked()
    expect(page.locator("#rendering-colormap-other")).to_be_hidden()
    page.select_option("#rendering-colormap", "other")
    page.fill("#rendering-colormap-other", "nope")
    page.click("#rendering-apply")
    expect(page.locator("#rendering-error")).to_contain_text("colormap_name")
    expect(page.locator(f"{row(page, dem)} input[type=checkbox]")).not_to_be_checked()

    before = canvas(page)
    page.fill("#rendering-colormap-other", "Cividis")
    page.click("#rendering-apply")
    expect(page.locator("#rendering-error")).to_have_text("")
    expect(page.locator(f"{row(page, dem)} input[type=checkbox]")).to_be_checked()
    expect(page.locator(row(page, dem))).to_have_attribute("data-drawn", "true", timeout=WAIT_MS)
    after = canvas(page)
    assert (np.abs(after - before) > 8).any(axis=-1).mean() > 0.3, "the DEM was not drawn"
    assert _coloured(after), "gray"
    expect(page.locator("#rendering-legend")).to_be_hidden()
    assert len(legends) == 2, legends  # legend.json and legend.png, once: 404, not asked again
    # the console has the two 404s the page was answered, and the 400 of the unknown name
    wrong = [e for e in tab.errors if "400" in e and "tilejson.json" in e]
    assert len(wrong) == 1, tab.errors
    tab.errors.remove(wrong[0])
    _clean_but_a_missing_legend(tab, landed=False)


def test_a_watched_layer_moves_on_the_map_without_a_reload(tab: Tab, settings: Settings) -> None:
    layer = "public.live_points"
    db = pg(settings.database_url)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "DROP TABLE IF EXISTS live_points; CREATE TABLE live_points (id serial PRIMARY KEY,"
            " name text, geom geometry(Point, 4326));"
            " INSERT INTO live_points (name, geom) VALUES ('mover', ST_Point(0, 0, 4326))"
        )
    assert httpx.put(f"{tab.base}/api-user/watches/{layer}", headers=AUTH).status_code == 200
    follower = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "follow"], env=settings_env(settings)
    )
    page = tab.page
    try:
        tab.open("/viewer#map=4/0/0")
        sign_in(tab)
        draw(page, layer)
        # the view again (drawing a layer fits it), and a mark that a reload would lose
        page.evaluate("() => { window.stayed = true; location.hash = 'map=4/0/0'; }")
        page.wait_for_timeout(300)
        before = canvas(page)
        height, width, _ = before.shape
        east = round(10 / 360 * 512 * 2**4)  # 10 degrees east at zoom 4 (512 px), in pixels
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("UPDATE live_points SET geom = ST_Point(10, 0, 4326)")
        deadline = time.monotonic() + WAIT_MS / 1000
        while True:
            after = canvas(page)
            moved = (np.abs(after - before) > 30).any(axis=-1)
            middle = moved[height // 2 - 4 : height // 2 + 5, width // 2 - 4 : width // 2 + 5]
            there = moved[
                height // 2 - 4 : height // 2 + 5, width // 2 + east - 4 : width // 2 + east + 5
            ]
            if middle.any() and there.any():
                break
            assert time.monotonic() < deadline, "the point did not move on the map"
            time.sleep(0.2)
        assert page.evaluate("() => window.stayed") is True  # no reload
        shoot(page, "viewer-live.png")
        tab.clean()
    finally:
        follower.terminate()
        follower.wait(timeout=20)
        httpx.delete(f"{tab.base}/api-user/watches/{layer}", headers=AUTH)
