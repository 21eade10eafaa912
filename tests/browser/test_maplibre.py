"""A web map on another origin: MapLibre GL JS in headless Chromium draws our tiles (CORS).

The API runs on a real uvicorn server; a second local HTTP server, on another port (so another
origin), serves page/map.html, page/map.js and MapLibre GL JS from node_modules (``npm ci`` in
tests/browser; ``deploy/services.sh --test-tools`` runs it). Debian's ``chromium`` opens the page
headless, WebGL on SwiftShader; the page draws our raster tiles and the vector tiles of our
TileJSON, and on ``idle`` posts what it saw back to its own server: the map's errors, the URLs
it asked for, the canvas's pixels and the features rendered. Chromium is a plain subprocess:
no driver, no extra Python package; the page tells us when it is done.

Private layers as a user adds them (issue 24): the page is given only the two TileJSON URLs
with ``?api_key=<key>`` of a reader key limited to the two layers, no layer public, no
``transformRequest``; MapLibre reads each TileJSON and asks the tiles it lists. The API records
what it was asked and answered, so the tests see every tile URL as sent.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit
from uuid import uuid4

import httpx
import numpy as np
import pytest
import redis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.app import create_app
from shared.settings import Settings
from tests.checks import ADMIN_KEY, AUTH
from tests.conftest import served, served_app
from tests.layers import configure, decode

HERE = Path(__file__).resolve().parent
PAGE = HERE / "page"
DIST = HERE / "node_modules" / "maplibre-gl" / "dist"
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
#: the tile the 256 px map shows exactly: Europe, Africa, Arabia, India, their seas
Z, X, Y = 2, 2, 1
VECTOR = "public.countries"
FILL = (255, 0, 255)  # the page's fill colour of the countries
#: how long one page may take, Chromium's start included
RUN_TIMEOUT_S = 25
#: the page's credentials (the suite's MAPSVC_ADMIN_API_KEY), sent as ``api_key`` as maps do
API_KEY = ADMIN_KEY

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="needs Debian's chromium (deploy/services.sh --test-tools installs it)",
    ),
]

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".map": "application/json",
}


class Pages(ThreadingHTTPServer):
    """The page's origin: its files, MapLibre's, and the results the page posts back."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _PageHandler)
        self.results: dict[str, dict[str, Any]] = {}
        self.posted = threading.Condition()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def wait(self, run: str, timeout: float) -> dict[str, Any] | None:
        with self.posted:
            self.posted.wait_for(lambda: run in self.results, timeout)
            return self.results.pop(run, None)


class _PageHandler(BaseHTTPRequestHandler):
    server: Pages

    def do_GET(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        if path in ("/", "/map.html"):
            file = PAGE / "map.html"
        elif path == "/map.js":
            file = PAGE / "map.js"
        elif path.startswith("/maplibre/") and "/" not in path.removeprefix("/maplibre/"):
            file = DIST / path.removeprefix("/maplibre/")
        else:
            file = PAGE / "missing"
        if not file.is_file():
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        body = file.read_bytes()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", _TYPES.get(file.suffix, "application/octet-stream"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        run = parse_qs(urlsplit(self.path).query).get("run", [""])[0]
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.server.posted:
            self.server.results[run] = json.loads(body)
            self.server.posted.notify_all()
        self.send_response(HTTPStatus.NO_CONTENT)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: the requests are not the test's output."""


@pytest.fixture(scope="module")
def pages() -> Iterator[Pages]:
    if not (DIST / "maplibre-gl.mjs").is_file():
        pytest.fail(f"MapLibre GL JS is missing: run `npm ci` in {HERE} (services.sh does)")
    server = Pages()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def world(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> str:
    """The world raster, configured: its layer id."""
    return configure(settings, rdb, "single/world.rgb.tif")


@pytest.fixture(scope="module")
def api(settings: Settings, world: str, vector_tables: str) -> Iterator[str]:
    """The API with its default CORS setting (any origin), on a real server."""
    with served(settings) as base:
        yield base


@pytest.fixture(scope="module")
def api_without_cors(settings: Settings, world: str, vector_tables: str) -> Iterator[str]:
    """The API allowing one unrelated origin only: the page's origin gets no CORS headers."""
    with served(settings.model_copy(update={"cors_origins": "https://unrelated.example"})) as base:
        yield base


class Recorded:
    """An app that records each request it answers: method, path with query, status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.answered: list[tuple[str, str, int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query = scope["query_string"].decode()
        url = scope["path"] + (f"?{query}" if query else "")

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.answered.append((scope["method"], url, message["status"]))
            await send(message)

        await self.app(scope, receive, sending)


@pytest.fixture(scope="module")
def private(settings: Settings, world: str, vector_tables: str) -> Iterator[tuple[str, Recorded]]:
    """The API with no public layer, on a real server, recording what it answers."""
    private_settings = settings.model_copy(update={"public_layers": ""})
    assert private_settings.auth.public_layers == ()
    recorded = Recorded(create_app(private_settings))
    with served_app(recorded, "/api-user/health") as base:
        yield base, recorded


@pytest.fixture(scope="module")
def reader_key(private: tuple[str, Recorded], world: str) -> str:
    """A new reader key limited to the world raster and the countries."""
    body = {"name": "maplibre", "role": "reader", "layers": [world, VECTOR]}
    r = httpx.post(f"{private[0]}/api-user/api-keys", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    key: str = r.json()["key"]
    return key


def open_page(
    pages: Pages,
    api: str,
    layer: str,
    api_key: str | None = None,
    tilejson: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Open the page in headless Chromium against ``api``; the result it posts back.

    ``tilejson``: the page's ``rasterjson`` and ``vectorjson``, the TileJSON URLs it draws from.
    """
    assert CHROMIUM is not None
    run = uuid4().hex
    query = {"api": api, "raster": layer, "vector": VECTOR, "z": Z, "x": X, "y": Y, "run": run}
    if api_key is not None:
        query["key"] = api_key
    query.update(tilejson or {})
    url = f"{pages.base}/map.html?{urlencode(query)}"
    with (
        tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile,
        tempfile.TemporaryFile() as log,
    ):
        argv = [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",  # root in CI containers
            "--use-angle=swiftshader",  # WebGL on the CPU: no GPU in CI
            "--enable-unsafe-swiftshader",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=400,400",
            "--enable-logging=stderr",
            url,
        ]
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            result = pages.wait(run, RUN_TIMEOUT_S)
        finally:
            _stop(proc)
        if result is None:
            log.seek(0)
            tail = log.read().decode(errors="replace")[-4000:]
            pytest.fail(f"the page posted no result in {RUN_TIMEOUT_S} s; Chromium said:\n{tail}")
    return result


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End Chromium and its helper processes (its own process group)."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def canvas(result: dict[str, Any]) -> np.ndarray:
    """The map's pixels, (rows, columns, RGBA)."""
    shot = result["pixels"]
    raw = np.frombuffer(base64.b64decode(shot["rgba"]), np.uint8)
    return raw.reshape(shot["height"], shot["width"], 4)


def api_requests(result: dict[str, Any], api: str) -> list[str]:
    return [url for url in result["requests"] if url.startswith(api)]


def test_maplibre_on_another_origin_draws_our_tiles(pages: Pages, api: str, world: str) -> None:
    assert urlsplit(pages.base).netloc != urlsplit(api).netloc  # another origin
    result = open_page(pages, api, world, API_KEY)
    assert result.get("exception") is None, result["exception"]
    assert result["errors"] == []
    assert result["reason"] == "idle"
    asked = api_requests(result, api)
    key = f"?api_key={API_KEY}"
    assert f"{api}/api-user/gis-datasource/{VECTOR}{key}" in asked
    assert f"{api}/api-user/rtile/{world}/en/{Z}/{X}/{Y}.png{key}" in asked
    assert any(url.startswith(f"{api}/api-user/vtile/{VECTOR}/") for url in asked)
    assert all(url.endswith(key) for url in asked)  # transformRequest added the key to each

    png = httpx.get(f"{api}/api-user/rtile/{world}/en/{Z}/{X}/{Y}.png", params=key[1:]).content
    assert_drawn(result, np.moveaxis(decode(png), 0, -1)[..., :3].astype(int))


def assert_drawn(result: dict[str, Any], tile: np.ndarray) -> None:
    """The page drew the raster's pixels ``tile`` (rows, columns, RGB: our z/x/y tile's) and
    the countries over them."""
    # the raster: every pixel drawn; where no country covers it, our tile's very pixels
    pixels = canvas(result)
    assert pixels.shape == (256, 256, 4)
    assert (pixels[..., 3] == 255).all(), "parts of the map are not drawn"
    filled = (np.abs(pixels[..., :3].astype(int) - FILL) <= 2).all(axis=-1)
    same = (np.abs(pixels[..., :3].astype(int) - tile) <= 3).all(axis=-1)
    assert 0.2 < filled.mean() < 0.95, f"{filled.mean():.0%} of the map is the countries' fill"
    assert same[~filled].mean() > 0.98, "the map's raster pixels are not our tile's"
    assert tile[~filled].std() > 10  # a real picture (sea and land), not one flat colour

    # the vector tiles: countries rendered with their properties
    rendered = {f["name"]: f for f in result["rendered"]}
    assert {"Egypt", "Saudi Arabia", "India", "Germany"} <= set(rendered)
    assert (rendered["Egypt"]["iso_a3"], rendered["Egypt"]["continent"]) == ("EGY", "Africa")
    assert rendered["India"]["pop_est"] > 1e9
    assert "Brazil" not in rendered


def test_without_cors_the_same_page_fails(pages: Pages, api_without_cors: str, world: str) -> None:
    """The control: the same page, the same key, an API that does not allow its origin."""
    result = open_page(pages, api_without_cors, world, API_KEY)
    assert result.get("exception") is None, result["exception"]
    assert result["errors"]
    failed = {error["url"]: error for error in result["errors"]}
    # what a user sees: MapLibre's own message, as in the issue
    assert all(e["message"].startswith("AJAXError: Failed to fetch") for e in result["errors"])
    tilejson = f"{api_without_cors}/api-user/gis-datasource/{VECTOR}?api_key={API_KEY}"
    assert failed[tilejson]["source"] == "countries"
    assert {error["source"] for error in result["errors"]} == {"countries", "raster"}
    assert any(f"/api-user/rtile/{world}/en/{Z}/{X}/{Y}.png" in url for url in failed)
    assert (canvas(result)[..., 3] == 0).all(), "something was drawn without CORS"
    assert result["rendered"] == []


def tilejsons(api: str, world: str, api_key: str | None) -> dict[str, str]:
    """The page's two TileJSON URLs, with ``api_key`` if one is given."""
    key = f"api_key={api_key}" if api_key else ""
    return {
        "rasterjson": f"{api}/api-user/rtile/{world}/tilejson.json?lang=en" + (key and f"&{key}"),
        "vectorjson": f"{api}/api-user/gis-datasource/{VECTOR}" + (key and f"?{key}"),
    }


def test_private_layers_drawn_from_their_tilejson_with_a_key(
    pages: Pages, private: tuple[str, Recorded], world: str, reader_key: str
) -> None:
    """A user pastes the TileJSON URLs with ``?api_key=``: the tiles they list carry it."""
    api, recorded = private
    key = f"api_key={reader_key}"
    given = tilejsons(api, world, reader_key)
    recorded.answered.clear()
    result = open_page(pages, api, world, tilejson=given)
    assert result.get("exception") is None, result["exception"]
    assert result["errors"] == []
    assert result["reason"] == "idle"
    assert result["requests"] == []  # no transformRequest: MapLibre asked what the TileJSON said

    answered = {url: status for _, url, status in recorded.answered}
    prefix = f"/api-user/rtile/{world}/tilejson.json"
    assert answered[given["rasterjson"].removeprefix(api)] == 200
    assert answered[given["vectorjson"].removeprefix(api)] == 200
    # the world raster's own zoom is Z - 1, the TileJSON's maxzoom: MapLibre enlarges that tile
    assert httpx.get(given["rasterjson"]).json()["maxzoom"] == Z - 1
    raster_tile = f"/api-user/rtile/{world}/en/{Z - 1}/{X // 2}/{Y // 2}.png?{key}"
    assert answered.get(raster_tile) == 200, "\n".join(answered)
    vtiles = [url for url in answered if url.startswith(f"/api-user/vtile/{VECTOR}/")]
    assert vtiles
    tiles = [url for url in answered if not url.startswith((prefix, "/api-user/gis-datasource/"))]
    assert set(tiles) >= {raster_tile, *vtiles}
    assert all(urlsplit(url).query.endswith(key) for url in tiles), tiles  # each carried the key
    assert all(status == 200 for status in answered.values()), answered  # no 401, none failed

    # our z/x/y is a quarter of that tile, each of its pixels drawn as 2 × 2 (nearest)
    parent = np.moveaxis(decode(httpx.get(f"{api}{raster_tile}").content), 0, -1)
    quarter = parent[(Y % 2) * 128 :, (X % 2) * 128 :][:128, :128, :3].astype(int)
    assert_drawn(result, quarter.repeat(2, axis=0).repeat(2, axis=1))


def test_private_tilejson_without_a_key_draws_nothing(
    pages: Pages, private: tuple[str, Recorded], world: str
) -> None:
    """The control: the same page, the TileJSON URLs without the key: 401, nothing drawn."""
    api, recorded = private
    given = tilejsons(api, world, None)
    recorded.answered.clear()
    result = open_page(pages, api, world, tilejson=given)
    assert result.get("exception") is None, result["exception"]
    failed = {error["url"]: error for error in result["errors"]}
    assert {failed[url]["status"] for url in given.values()} == {401}
    assert {failed[url]["source"] for url in given.values()} == {"raster", "countries"}
    answered = {url: status for _, url, status in recorded.answered}
    assert answered == {url.removeprefix(api): 401 for url in given.values()}  # no tile asked
    assert (canvas(result)[..., 3] == 0).all(), "something was drawn without the key"
    assert result["rendered"] == []
