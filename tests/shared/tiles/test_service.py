"""The tile service: the cache first, one render per missing tile, nothing rendered outside."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import cast

import pytest

from shared.base.grid import TileAddress
from shared.base.png import Rendered, transparent_png
from shared.raster.paths import encode_id
from shared.raster.style import StyleSpec, style_xml
from shared.tiles.pool import RenderPool
from shared.tiles.service import TileService
from shared.tiles.store import FileTileStore, etag_of, tile_key

pytestmark = pytest.mark.anyio

STYLE = encode_id("unit/service.tif")
INSIDE = TileAddress(2, 1, 1)
OUTSIDE = TileAddress(2, 3, 3)


class CountingPool:
    """Stands for the render pool: each render is counted and answers the same PNG."""

    def __init__(self) -> None:
        self.renders = 0

    async def render(self, *args: object, **kwargs: object) -> Rendered:
        self.renders += 1
        await asyncio.sleep(0.05)  # long enough for concurrent requests to meet
        return Rendered(b"\x89PNG rendered", False)


@pytest.fixture
def service(tmp_path: Path) -> tuple[TileService, CountingPool]:
    spec = StyleSpec(
        name="service",
        bounds=list(INSIDE.bounds_4326()),
        zoom=2,
        srs="epsg:3857",
        source=tmp_path / "scene.tif",
        preview=None,
        preview_min_scale=0.0,
        nodata=None,
    )
    (tmp_path / f"{STYLE}.xml").write_text(style_xml(spec, tmp_path))
    pool = CountingPool()
    return TileService(tmp_path, cast(RenderPool, pool)), pool


async def test_a_tile_outside_the_footprint_is_empty_without_a_render(
    service: tuple[TileService, CountingPool], tmp_path: Path
) -> None:
    tiles, pool = service
    store = FileTileStore(tmp_path / "rtile")

    result = await tiles.tile(STYLE, "en", OUTSIDE, store, refresh=False)

    assert (result.data, result.cache, result.empty) == (transparent_png(), "MISS", True)
    assert pool.renders == 0
    assert not (tmp_path / "rtile").exists()


async def test_a_miss_renders_and_stores_then_the_cache_answers(
    service: tuple[TileService, CountingPool], tmp_path: Path
) -> None:
    tiles, pool = service
    store = FileTileStore(tmp_path / "rtile")

    first = await tiles.tile(STYLE, "en", INSIDE, store, refresh=False)
    second = await tiles.tile(STYLE, "en", INSIDE, store, refresh=False)

    assert (first.data, first.cache, first.empty) == (b"\x89PNG rendered", "MISS", False)
    assert store.get(tile_key(STYLE, "en", INSIDE)) == b"\x89PNG rendered"
    assert (second.data, second.cache) == (b"\x89PNG rendered", "HIT")
    assert pool.renders == tiles.renders == 1


async def test_a_refresh_renders_again_and_stores_nothing(
    service: tuple[TileService, CountingPool], tmp_path: Path
) -> None:
    tiles, pool = service
    store = FileTileStore(tmp_path / "rtile")
    store.put(tile_key(STYLE, "en", INSIDE), b"cached")

    result = await tiles.tile(STYLE, "en", INSIDE, store, refresh=True)

    assert (result.data, result.cache) == (b"\x89PNG rendered", "MISS")
    assert store.get(tile_key(STYLE, "en", INSIDE)) == b"cached"
    assert pool.renders == 1


async def test_concurrent_misses_of_one_tile_share_one_render(
    service: tuple[TileService, CountingPool], tmp_path: Path
) -> None:
    tiles, pool = service
    store = FileTileStore(tmp_path / "rtile")

    results = await asyncio.gather(
        *(tiles.tile(STYLE, "en", INSIDE, store, refresh=False) for _ in range(5))
    )

    assert {r.data for r in results} == {b"\x89PNG rendered"}
    assert pool.renders == 1


def test_an_etag_is_a_strong_tag_of_the_bytes() -> None:
    tag = etag_of(b"\x89PNG one")

    assert re.fullmatch(r'"[0-9a-f]{32}"', tag)
    assert etag_of(b"\x89PNG one") == tag
    assert etag_of(b"\x89PNG two") != tag
