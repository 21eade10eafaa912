"""The nginx front (``make run``): cached tiles of public layers from disk, the rest to the API."""

from __future__ import annotations

import http.client
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from api.front import front_argv, write_front_config
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.conftest import free_port, served
from tests.layers import MOSAIC_ID, RGB, RGB_ID, configure, decode, tile_url

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx")

TILE = tile_url(RGB_ID, 8, 72, 110)


def ogc_url(style: str, z: int, x: int, y: int, suffix: str = ".png", tms: str = "") -> str:
    """The OGC API URL of rtile's tile ``z/x/y`` (OGC's order in the path: z/y/x)."""
    return f"/api-user/ogc/collections/{style}/tiles/{tms or 'WebMercatorQuad'}/{z}/{y}/{x}{suffix}"


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


@contextmanager
def front_work(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> Iterator[Settings]:
    """``settings`` with a work dir of their own, the Landsat scene and the folder of its
    quarters configured there: started as root, nginx's workers run as an unprivileged user,
    who cannot pass pytest's folders (0700) to reach the tile cache."""
    work = Path(tempfile.mkdtemp(prefix="mapsvc-front-"))
    work.chmod(0o755)
    mine = settings.model_copy(update={"work_dir": work})
    for rel in (RGB, "bahamas-tiles"):
        copy = shutil.copytree if (raster_dir / rel).is_dir() else shutil.copy
        (mine.dirs.raster / rel).parent.mkdir(parents=True, exist_ok=True)
        copy(raster_dir / rel, mine.dirs.raster / rel)
        configure(mine, rdb, rel)
    try:
        yield mine
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def front_settings(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> Iterator[Settings]:
    """The suite's settings in a work dir the front's workers reach (:func:`front_work`)."""
    with front_work(settings, rdb, raster_dir) as mine:
        yield mine


@pytest.fixture(scope="module")
def fronted(front_settings: Settings) -> Iterator[tuple[str, Settings]]:
    mine = front_settings.model_copy(
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
    assert hit.headers["cache-control"] == f"public, max-age={settings.tiles.max_age_s}"
    assert hit.headers["access-control-allow-origin"] == "*"
    etag = hit.headers["etag"]
    assert etag.startswith('"')  # a strong validator
    again = httpx.get(f"{base}{TILE}", headers={"If-None-Match": etag})
    assert again.status_code == 304
    # the form without a language is the default language's file
    nolang = httpx.get(f"{base}/api-user/rtile/{RGB_ID}/8/72/110.png")
    assert nolang.content == first.content
    assert "x-request-id" not in nolang.headers


def test_queries_bad_keys_and_private_layers_go_to_the_api(
    fronted: tuple[str, Settings],
) -> None:
    base, _ = fronted
    httpx.get(f"{base}{TILE}")  # cached now
    for kwargs in ({"params": {"nocache": "1"}}, {"params": {"api_key": "msk_wrong"}}):
        r = httpx.get(f"{base}{TILE}", **kwargs)  # type: ignore[arg-type]
        assert "x-request-id" in r.headers, kwargs
    # valid credentials: the API says yes once, the front sends the file
    assert "x-request-id" not in httpx.get(f"{base}{TILE}", headers=AUTH).headers
    assert httpx.get(f"{base}{TILE}", params={"nocache": "1"}).headers["x-cache"] == "MISS"
    private = httpx.get(f"{base}{tile_url(MOSAIC_ID, 8, 72, 110)}")
    assert private.status_code == 401
    assert_error(private.json(), "unauthorized")
    assert httpx.get(f"{base}/api-user/gis-raster", headers=AUTH).status_code == 200


def test_the_front_keeps_the_tiles_budget(front_settings: Settings) -> None:
    mine = front_settings.model_copy(
        update={"public_layers": RGB_ID, "port": free_port(), "rate_tiles_per_min": 3}
    )
    with served(mine) as api, front(mine, api.removeprefix("http://")) as base:
        httpx.get(f"{base}{TILE}", params={"nocache": "1"}, headers=AUTH)
        httpx.get(f"{base}{TILE}", headers={**AUTH, "X-Request-ID": "fill"})  # cached
        for headers in ({}, AUTH):  # per client address; per key
            answers = [httpx.get(f"{base}{TILE}", headers=headers) for _ in range(6)]
            assert answers[0].status_code == 200
            refused = [r for r in answers if r.status_code == 429]
            assert refused, headers
            assert refused[0].headers["content-type"] == "application/json"
            assert_error(refused[0].json(), "rate-limited")
            assert int(refused[0].headers["retry-after"]) >= 1
        assert httpx.get(f"{base}/api-user/health").status_code == 200


def test_the_front_slows_then_refuses_a_flood_from_one_address_before_the_api(
    front_settings: Settings,
) -> None:
    """An address asking faster than ``MAPSVC_FRONT_RATE_PER_S`` gets ``MAPSVC_FRONT_BURST``
    answers at once, ``MAPSVC_FRONT_QUEUE`` kept to the pace, and nginx's own ``429`` for the rest
    (``budget: address``, which no API budget is named), on every route that passes to the
    API, keyed or not, wrong keys on tiles included (the access check counts too); another
    address is not slowed, and cached public tiles keep their own budget."""
    mine = front_settings.model_copy(
        update={
            "public_layers": RGB_ID,
            "port": free_port(),
            "front_rate_per_s": 10,
            "front_burst": 3,
            "front_queue": 3,
        }
    )
    private = tile_url(MOSAIC_ID, 8, 72, 110)
    # each request's keyword arguments by its number; wrong keys each another (the front asks
    # about one credential once at a time: the same wrong key sent at once waits its turn)
    routes: tuple[tuple[str, Callable[[int], dict[str, Any]]], ...] = (
        ("/api-user/health", lambda i: {}),
        ("/api-user/gis-raster", lambda i: {"headers": AUTH}),
        (TILE, lambda i: {"params": {"nocache": "1"}}),
        (TILE, lambda i: {"params": {"api_key": f"msk_wrong{i}"}}),
        (private, lambda i: {"headers": {"Authorization": f"Bearer msk_wrong{i}"}}),
    )
    with served(mine) as api, front(mine, api.removeprefix("http://")) as base:
        assert httpx.get(f"{api}{TILE}").status_code == 200  # cached, straight from the API
        other = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"))
        with ThreadPoolExecutor(20) as pool:
            for path, how in routes:
                t0 = time.monotonic()
                asked = [pool.submit(httpx.get, f"{base}{path}", **how(i)) for i in range(20)]
                answers = [future.result() for future in asked]
                seconds = time.monotonic() - t0
                refused = [r for r in answers if r.status_code == 429]
                assert 8 <= len(refused) <= 14, (path, len(refused))  # 20 - (1 + 3 + 3), ±3
                assert seconds >= 0.2, path  # the 3 kept waiting were sent at the pace
                assert refused[0].headers["content-type"] == "application/json"
                error = refused[0].json()["error"]
                assert (error["code"], error["detail"]["budget"]) == ("rate-limited", "address")
                assert int(refused[0].headers["retry-after"]) >= 1
                # another address meanwhile: answered by the API as before
                assert other.get(f"{base}/api-user/health").status_code == 200
                time.sleep(1)  # the address back to its pace
        # anonymous public tiles from disk count the tiles budget, not the address's pace
        assert all(httpx.get(f"{base}{TILE}").status_code == 200 for _ in range(20))
        other.close()


def test_tiles_with_rendering_parameters_count_on_the_callers_budget(
    front_settings: Settings,
) -> None:
    mine = front_settings.model_copy(
        update={"public_layers": RGB_ID, "port": free_port(), "rate_tiles_per_min": 3}
    )
    asked = f"{TILE}?colormap_name=viridis&bidx=1"
    with served(mine) as api, front(mine, api.removeprefix("http://")) as base:
        assert httpx.get(f"{api}{asked}", headers=AUTH).status_code == 200  # cached
        answers = [httpx.get(f"{base}{asked}") for _ in range(6)]  # anonymous: per address
        assert answers[0].status_code == 200
        assert "x-request-id" not in answers[0].headers  # from disk
        refused = [r for r in answers if r.status_code == 429]
        assert refused
        assert_error(refused[0].json(), "rate-limited")
        # a key's budget is its own, not the address's
        keyed = [httpx.get(f"{base}{asked}", headers=AUTH) for _ in range(6)]
        assert keyed[0].status_code == 200
        assert any(r.status_code == 429 for r in keyed)
        assert httpx.get(f"{base}/api-user/health").status_code == 200


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


def test_an_ogc_tile_is_the_rtile_file_sent_from_disk(fronted: tuple[str, Settings]) -> None:
    base, settings = fronted
    cached = settings.dirs.rtile / RGB_ID / settings.default_lang / "9" / "145" / "221.webp"
    cached.unlink(missing_ok=True)
    url = ogc_url(RGB_ID, 9, 145, 221, ".webp")
    first = httpx.get(f"{base}{url}")  # not cached: the API renders and stores rtile's file
    assert first.status_code == 200
    assert "x-request-id" in first.headers
    assert cached.read_bytes() == first.content
    rtile = httpx.get(f"{base}{tile_url(RGB_ID, 9, 145, 221, suffix='.webp')}")
    for path in (url, url.replace("/api-user/", "/api/v1/")):
        hit = httpx.get(f"{base}{path}", headers={"Origin": "https://map.example"})
        assert "x-request-id" not in hit.headers, path  # the front answered, from the file
        assert hit.content == first.content
        for header in ("content-type", "x-cache", "cache-control", "etag"):
            assert hit.headers[header] == rtile.headers[header], header
        assert hit.headers["access-control-allow-origin"] == "*"
        assert (
            httpx.get(f"{base}{path}", headers={"If-None-Match": hit.headers["etag"]}).status_code
            == 304
        )
    # a tile rtile cached, in every spelling of its format: the same files
    for suffix, media in ((".png", "image/png"), (".jpg", "image/jpeg"), (".jpeg", "image/jpeg")):
        from_rtile = httpx.get(f"{base}{tile_url(RGB_ID, 9, 144, 220, suffix=suffix)}")
        assert from_rtile.status_code == 200
        hit = httpx.get(f"{base}{ogc_url(RGB_ID, 9, 144, 220, suffix)}")
        assert "x-request-id" not in hit.headers, suffix
        assert hit.headers["content-type"] == media
        assert hit.content == from_rtile.content
        pixels = decode(hit.content)
        assert pixels.shape[1:] == (256, 256)
        assert pixels[:3].any()  # the scene, not an empty tile
    # a query (a language), another tile matrix set, the f= form, mvt: the API answers
    for path, status in (
        (f"{url}?lang={settings.default_lang}", 200),
        (ogc_url(RGB_ID, 9, 145, 221, ".webp", tms="WorldCRS84Quad"), 404),
        (ogc_url(RGB_ID, 9, 145, 221, ".webp", tms="webmercatorquad"), 404),
        (ogc_url(RGB_ID, 9, 145, 221, "?f=webp"), 200),
        (ogc_url(RGB_ID, 9, 145, 221, ".mvt"), 400),
    ):
        r = httpx.get(f"{base}{path}")
        assert r.status_code == status, (path, r.text)
        assert "x-request-id" in r.headers, path
        if status == 200:
            assert r.content == first.content


def test_a_tile_with_rendering_parameters_comes_from_disk_once_cached(
    fronted: tuple[str, Settings],
) -> None:
    base, settings = fronted
    path = tile_url(RGB_ID, 9, 145, 220)
    asked = "colormap_name=viridis&bidx=2&rescale=10,200"
    first = httpx.get(f"{base}{path}?{asked}")  # not cached: the API renders and stores it
    assert first.status_code == 200, first.text
    assert "x-request-id" in first.headers
    assert first.headers["x-cache"] == "MISS"
    lang = settings.default_lang
    cached = list((settings.dirs.rtile / RGB_ID).glob(f"{lang}~*/9/145/220.png"))
    assert [p.read_bytes() for p in cached] == [first.content]
    plain = httpx.get(f"{base}{path}")
    assert plain.content != first.content  # the layer's own drawing is another tile
    # the same values in another order and spelling, on the rtile and OGC API routes: the file
    for url in (
        f"{path}?rescale=10.0,200&bidx=2&colormap_name=viridis",
        f"{ogc_url(RGB_ID, 9, 145, 220)}?{asked}",
        f"{path.replace('/api-user/', '/api/v1/')}?{asked}",
    ):
        hit = httpx.get(f"{base}{url}")
        assert hit.status_code == 200, url
        assert "x-request-id" not in hit.headers, url  # the front answered, from the file
        assert hit.content == first.content
        assert hit.headers["x-cache"] == "HIT"
        assert hit.headers["etag"] == first.headers["etag"]
    pixels = decode(first.content)
    assert (pixels[3] == 255).mean() > 0.5  # the scene, coloured by viridis
    assert len({tuple(c) for c in pixels[:3, pixels[3] == 255].T}) > 10
    # anything beside rendering parameters, or a parameter the layer refuses: the API answers
    for query, status in ((f"{asked}&nocache=1", 200), ("bidx=9", 400), ("bidx=x", 400)):
        r = httpx.get(f"{base}{path}?{query}")
        assert r.status_code == status, (query, r.text)
        assert "x-request-id" in r.headers, query
        if status == 400:
            assert_error(r.json(), "invalid-input")
    # a layer that is not public: the parameters do not open it
    private = httpx.get(f"{base}{tile_url(MOSAIC_ID, 9, 145, 220)}?{asked}")
    assert private.status_code == 401
    assert_error(private.json(), "unauthorized")
    with_key = httpx.get(f"{base}{tile_url(MOSAIC_ID, 9, 145, 220)}?{asked}", headers=AUTH)
    assert with_key.status_code == 200
    again = httpx.get(f"{base}{tile_url(MOSAIC_ID, 9, 145, 220)}?{asked}", headers=AUTH)
    assert "x-request-id" not in again.headers  # the API said yes: the front sent the file
    assert again.content == with_key.content
    assert again.headers["cache-control"] == f"private, max-age={settings.tiles.max_age_s}"


def _new_key(api: str, layers: list[str] | None) -> dict[str, Any]:
    body = {"name": "front", "role": "reader", "layers": layers}
    made = httpx.post(f"{api}/api-user/api-keys", json=body, headers=AUTH)
    assert made.status_code == 201, made.text
    return dict(made.json())


@pytest.fixture(scope="module")
def keyed(front_settings: Settings) -> Iterator[tuple[str, str, Settings]]:
    """The front with the API's yes kept 1 s: the base URLs of the front and of the API."""
    mine = front_settings.model_copy(
        update={"public_layers": RGB_ID, "port": free_port(), "front_access_ttl_s": 1}
    )
    with served(mine) as api:
        with front(mine, api.removeprefix("http://")) as base:
            yield base, api, mine


@pytest.mark.parametrize(
    "path", [tile_url(MOSAIC_ID, 8, 72, 110), ogc_url(MOSAIC_ID, 8, 72, 110)], ids=["rtile", "ogc"]
)
def test_a_key_reads_cached_tiles_of_its_layers_from_disk(
    keyed: tuple[str, str, Settings], path: str
) -> None:
    base, api, settings = keyed
    url = f"{base}{path}"
    cached = settings.dirs.rtile / MOSAIC_ID / "en" / "8" / "72" / "110.png"
    cached.unlink(missing_ok=True)
    first = httpx.get(url, headers=AUTH)  # rendered and cached by the API
    assert first.status_code == 200
    assert "x-request-id" in first.headers
    assert cached.read_bytes() == first.content
    key = _new_key(api, [MOSAIC_ID])["key"]
    for kwargs in ({"headers": {"Authorization": f"Bearer {key}"}}, {"params": {"api_key": key}}):
        hit = httpx.get(url, **kwargs)  # type: ignore[arg-type]
        assert hit.status_code == 200, hit.text
        assert "x-request-id" not in hit.headers, kwargs  # the front answered, from the file
        assert hit.content == first.content
        assert hit.headers["x-cache"] == "HIT"
        # a layer that is not public: never kept by a shared cache
        assert hit.headers["cache-control"] == f"private, max-age={settings.tiles.max_age_s}"
        again = httpx.get(
            url,
            headers={**kwargs.get("headers", {}), "If-None-Match": hit.headers["etag"]},
            params=kwargs.get("params"),
        )  # type: ignore[arg-type]
        assert again.status_code == 304
    # the API gives the cached tile the same ETag as the front: a validator works on both
    from_api = httpx.get(f"{api}{path}", headers=AUTH)
    assert from_api.headers["x-cache"] == "HIT"
    assert from_api.headers["etag"] == hit.headers["etag"]
    revalidated = httpx.get(f"{api}{path}", headers={**AUTH, "If-None-Match": hit.headers["etag"]})
    assert revalidated.status_code == 304
    first_etag = first.headers["etag"]  # the API's answer when it rendered and stored the tile
    assert first_etag == hit.headers["etag"]


def test_keys_the_front_may_not_honour_get_the_apis_answer(
    keyed: tuple[str, str, Settings],
) -> None:
    base, api, _ = keyed
    url = f"{base}{tile_url(MOSAIC_ID, 8, 72, 110)}"
    assert httpx.get(url, headers=AUTH).status_code == 200  # cached
    other = _new_key(api, [RGB_ID])["key"]  # may not see the mosaic: as if it did not exist
    hidden = httpx.get(url, headers={"Authorization": f"Bearer {other}"})
    assert hidden.status_code == 404
    assert_error(hidden.json(), "not-found")
    for wrong, code in (
        ({"headers": {"Authorization": "Bearer not.a.token"}}, "invalid-token"),
        ({"params": {"api_key": "msk_wrong"}}, "unauthorized"),
    ):
        r = httpx.get(url, **wrong)  # type: ignore[arg-type]
        assert r.status_code == 401, wrong
        assert_error(r.json(), code)
    # a query beside the key, or an unknown style: the API answers
    key = _new_key(api, None)["key"]
    with_query = httpx.get(url, params={"api_key": key, "nocache": "1"})
    assert with_query.headers["x-cache"] == "MISS"
    unknown = httpx.get(f"{base}{tile_url('nosuchstyle', 8, 72, 110)}", params={"api_key": key})
    assert unknown.status_code == 404
    assert_error(unknown.json(), "not-found")
    assert httpx.get(f"{base}/api-user/health").status_code == 200


def test_a_revoked_key_stops_reading_once_the_kept_yes_ends(
    keyed: tuple[str, str, Settings],
) -> None:
    base, api, settings = keyed
    url = f"{base}{tile_url(MOSAIC_ID, 8, 72, 110)}"
    assert httpx.get(url, headers=AUTH).status_code == 200  # cached
    made = _new_key(api, None)
    headers = {"Authorization": f"Bearer {made['key']}"}
    assert httpx.get(url, headers=headers).status_code == 200
    gone = httpx.delete(f"{api}/api-user/api-keys/{made['id']}", headers=AUTH)
    assert gone.status_code in (200, 204)
    # nginx counts a kept answer's life in whole seconds: it ends within the TTL and one second
    deadline = time.monotonic() + settings.front_access_ttl_s + 1.5
    while (refused := httpx.get(url, headers=headers)).status_code == 200:
        assert time.monotonic() < deadline, "the front still sends tiles to a revoked key"
        time.sleep(0.1)
    assert refused.status_code == 401
    assert_error(refused.json(), "unauthorized")
    assert (settings.dirs.rtile / MOSAIC_ID / "en" / "8" / "72" / "110.png").is_file()


@pytest.mark.parametrize(
    ("url", "private"),
    [
        (
            "/api-user/vtile/public.countries/1/0/0.pbf",
            "/api/v1/vtile/public.test_points/1/0/0.pbf",
        ),
        (
            "/api-user/ogc/collections/public.countries/tiles/WebMercatorQuad/1/0/0.mvt",
            "/api/v1/ogc/collections/public.test_points/tiles/WebMercatorQuad/1/0/0.mvt",
        ),
    ],
    ids=["vtile", "ogc"],
)
def test_the_front_keeps_vector_tiles_of_public_layers_a_moment(
    front_settings: Settings, vector_tables: str, url: str, private: str
) -> None:
    mine = front_settings.model_copy(
        update={
            "public_layers": f"{RGB_ID},public.countries",
            "port": free_port(),
            "front_vtile_ttl_s": 60,
        }
    )
    gzip = {"Accept-Encoding": "gzip"}
    with served(mine) as api, front(mine, api.removeprefix("http://")) as base:
        first = httpx.get(f"{base}{url}", headers=gzip)
        assert first.status_code == 200
        assert "x-request-id" in first.headers  # the API answered
        kept = httpx.get(f"{base}{url}", headers=gzip)
        assert "x-request-id" not in kept.headers  # the front answered
        assert kept.headers["x-cache"] == "HIT"
        assert kept.headers["content-encoding"] == "gzip"
        assert kept.content == first.content
        assert kept.headers["cache-control"] == first.headers["cache-control"]
        plain = httpx.get(f"{base}{url}", headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers  # kept apart from the gzip answer
        assert plain.content == first.content  # httpx decoded the gzip one
        # a query, credentials, a layer that is not public: the API answers every time
        asked = f"{url}?nocache=1" if "/vtile/" in url else f"{url}?lang=en"
        for path, headers in ((asked, gzip), (url, AUTH), (private, AUTH)):
            for _ in range(2):
                r = httpx.get(f"{base}{path}", headers=headers)
                assert r.status_code in (200, 204), (path, r.text)
                assert "x-request-id" in r.headers, path
        assert httpx.get(f"{base}{private}").status_code == 401
        # the tile is vtile's: the same features
        same = httpx.get(f"{base}/api-user/vtile/public.countries/1/0/0.pbf", headers=gzip)
        assert same.content == first.content
        assert b"France" in first.content  # a feature's name, in the MVT


def test_with_the_api_down_cached_public_tiles_still_come_and_the_rest_is_a_json_503(
    front_settings: Settings,
) -> None:
    mine = front_settings.model_copy(update={"public_layers": RGB_ID, "port": free_port()})
    with served(mine) as api:
        assert httpx.get(f"{api}{TILE}", headers=AUTH).status_code == 200  # cached
    cached = mine.dirs.rtile / RGB_ID / "en" / "8" / "72" / "110.png"
    # nothing listens at the backend now
    with front(mine, f"127.0.0.1:{free_port()}") as base:
        tile = httpx.get(f"{base}{TILE}")
        assert tile.status_code == 200
        assert tile.content == cached.read_bytes()
        for path, headers in (
            ("/api-user/health", {}),
            # a credential the front has no yes for: it must ask the API first
            (TILE, {"Authorization": f"Bearer msk_{uuid.uuid4().hex}"}),
            (f"{TILE}?nocache=1", {}),
            ("/api-user/vtile/public.countries/1/0/0.pbf", {}),
        ):
            r = httpx.get(f"{base}{path}", headers=headers)
            assert r.status_code == 503, path
            assert r.headers["content-type"] == "application/json"
            assert_error(r.json(), "unavailable")
            assert r.headers["retry-after"] == "5"


@pytest.mark.parametrize(
    ("path", "layer"),
    [
        (tile_url(MOSAIC_ID, 8, 72, 110), "/rtile/"),
        (ogc_url(MOSAIC_ID, 8, 72, 110), "/collections/"),
    ],
    ids=["rtile", "ogc"],
)
def test_a_path_that_climbs_out_of_a_layer_is_checked_as_the_layer_it_lands_on(
    keyed: tuple[str, str, Settings], path: str, layer: str
) -> None:
    base, api, settings = keyed
    assert httpx.get(f"{base}{path}", headers=AUTH).status_code == 200
    other = _new_key(api, [RGB_ID])["key"]  # may read the RGB layer, not the mosaic
    host, port = base.removeprefix("http://").split(":")
    for climb in ("..", "%2e%2e", "%2E%2E"):
        target = path.replace(layer, f"{layer}{RGB_ID}/{climb}/", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", target, headers={"Authorization": f"Bearer {other}"})
        answer = conn.getresponse()
        body = answer.read()
        conn.close()
        assert answer.status != 200, climb  # never the mosaic's tile
        assert not body.startswith(b"\x89PNG"), climb
