"""The nginx front (``make run``): cached tiles of public layers from disk, the rest to the API."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from api.front import front_argv, write_front_config
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.conftest import free_port, served
from tests.layers import MOSAIC_ID, RGB_ID, tile_url

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx")

TILE = tile_url(RGB_ID, 8, 72, 110)


@contextmanager
def front(settings: Settings, backend: str) -> Iterator[str]:
    """nginx before the API at ``backend``, as ``make run`` starts it; its base URL."""
    proc = subprocess.Popen(front_argv(write_front_config(settings, backend)))
    base = f"http://{settings.host}:{settings.port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                httpx.get(f"{base}/api-user/health")
                break
            except httpx.HTTPError:
                assert proc.poll() is None, "nginx stopped"
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def fronted(settings: Settings, layers: None) -> Iterator[tuple[str, Settings]]:
    mine = settings.model_copy(
        update={"public_layers": RGB_ID, "port": free_port(), "rate_tiles_per_min": 600}
    )
    with served(mine) as api:
        with front(mine, api.removeprefix("http://")) as base:
            yield base, mine


def test_a_cached_public_tile_comes_from_disk_byte_for_byte(fronted: tuple[str, Settings]) -> None:
    base, settings = fronted
    cached = settings.dirs.rtile / RGB_ID / "en" / "8" / "72" / "110.png"
    cached.unlink(missing_ok=True)
    first = httpx.get(f"{base}{TILE}")  # not cached: the API renders and stores it
    assert first.status_code == 200
    assert first.headers["x-cache"] == "MISS"
    assert "x-request-id" in first.headers  # the API answered
    assert cached.read_bytes() == first.content
    hit = httpx.get(f"{base}{TILE}", headers={"Origin": "https://map.example"})
    assert hit.status_code == 200
    assert "x-request-id" not in hit.headers  # the front answered, from the file
    assert hit.content == first.content
    assert hit.headers["content-type"] == "image/png"
    assert hit.headers["x-cache"] == "HIT"
    assert hit.headers["cache-control"] == f"public, max-age={settings.tiles.tile_max_age_s}"
    assert hit.headers["access-control-allow-origin"] == "*"
    etag = hit.headers["etag"]
    assert etag.startswith('"')  # a strong validator
    again = httpx.get(f"{base}{TILE}", headers={"If-None-Match": etag})
    assert again.status_code == 304
    # the form without a language is the default language's file
    nolang = httpx.get(f"{base}/api-user/rtile/{RGB_ID}/8/72/110.png")
    assert nolang.content == first.content
    assert "x-request-id" not in nolang.headers


def test_credentials_queries_and_private_layers_go_to_the_api(
    fronted: tuple[str, Settings],
) -> None:
    base, _ = fronted
    httpx.get(f"{base}{TILE}")  # cached now
    for kwargs in (
        {"headers": AUTH},
        {"params": {"nocache": "1"}},
        {"params": {"api_key": "msk_wrong"}},
    ):
        r = httpx.get(f"{base}{TILE}", **kwargs)  # type: ignore[arg-type]
        assert "x-request-id" in r.headers, kwargs
    assert httpx.get(f"{base}{TILE}", params={"nocache": "1"}).headers["x-cache"] == "MISS"
    private = httpx.get(f"{base}{tile_url(MOSAIC_ID, 8, 72, 110)}")
    assert private.status_code == 401
    assert_error(private.json(), "unauthorized")
    assert httpx.get(f"{base}/api-user/gis-raster", headers=AUTH).status_code == 200


def test_the_front_keeps_the_tiles_budget(settings: Settings, layers: None) -> None:
    mine = settings.model_copy(
        update={"public_layers": RGB_ID, "port": free_port(), "rate_tiles_per_min": 3}
    )
    with served(mine) as api, front(mine, api.removeprefix("http://")) as base:
        httpx.get(f"{base}{TILE}", headers=AUTH)  # cached through the API
        statuses = [httpx.get(f"{base}{TILE}").status_code for _ in range(6)]
    assert statuses[0] == 200
    assert 429 in statuses


def test_every_format_and_retina_tile_comes_from_disk(fronted: tuple[str, Settings]) -> None:
    base, settings = fronted
    for suffix, media in (("@2x.webp", "image/webp"), (".jpg", "image/jpeg")):
        url = f"{base}{tile_url(RGB_ID, 9, 144, 220, suffix=suffix)}"
        first = httpx.get(url)  # rendered and cached by the API
        assert first.status_code == 200
        assert "x-request-id" in first.headers
        hit = httpx.get(url)
        assert "x-request-id" not in hit.headers, suffix
        assert hit.headers["content-type"] == media
        assert hit.content == first.content
    jpeg = httpx.get(f"{base}{tile_url(RGB_ID, 9, 144, 220, suffix='.jpeg')}")
    assert "x-request-id" not in jpeg.headers  # .jpeg is the .jpg file
