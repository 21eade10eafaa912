"""The front door, the viewer and the API docs in a real browser: Debian's chromium, Playwright.

The API runs on a real uvicorn server (a Celery worker for the job tests); the pages are the
build of ``api/web`` (``make web``). Chromium is Debian's (``executable_path``; Playwright
downloads no browser), WebGL on SwiftShader. The map's pixels are read from its canvas
(``preserveDrawingBuffer``). With ``MAPSVC_SCREENSHOTS=<folder>`` (``make screenshots``: the
committed ``docs/images``) the tests save screenshots of what they checked.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
import redis
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, expect, sync_playwright

from api.routes.web import DIST
from shared.raster.paths import encode_id
from shared.settings import Settings
from tests.checks import ADMIN_KEY, AUTH, PYPROJECT_VERSION
from tests.conftest import served
from tests.layers import configure, decode

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
    expect(page.locator("#map")).to_have_attribute("data-state", "idle")
    url = page.evaluate("() => document.querySelector('#map canvas').toDataURL('image/png')")
    pixels = decode(base64.b64decode(url.split(",", 1)[1]))
    return np.moveaxis(pixels[:3], 0, -1).astype(int)


def row(page: Page, layer: str) -> str:
    return f'li[data-layer-id="{layer}"]'


def draw(page: Page, layer: str) -> None:
    """Tick a layer's box, and wait until the map has loaded its tiles."""
    page.check(f"{row(page, layer)} input[type=checkbox]")
    expect(page.locator(row(page, layer))).to_have_attribute("data-drawn", "true")


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
    started = httpx.get(
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
    started = httpx.get(
        f"{tab.base}/api-user/gis-layer-export/{world}",
        params={"format": "pmtiles", "minzoom": 0, "maxzoom": 4, "async": 1},
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
