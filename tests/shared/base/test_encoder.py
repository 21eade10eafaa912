"""Encoding drawn images into tiles: the fast paths give Mapnik's pixels, tile for tile.

A tile of one colour is encoded once per process and its bytes reused; a PNG tile is written by
numpy and zlib-ng. Each is checked against Mapnik encoding the same pixels (the drawn image, cut
as before these paths: a view, flattened over white for JPEG), on real renders of the demo
countries, named, in every format: WebP and JPEG tiles are Mapnik's own bytes, PNG tiles give
its pixels back to GDAL and to Mapnik, in fewer bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from shared.base.encoder import Cutter, SolidTiles
from shared.base.encoding import JPEG_BACKGROUND, PNG_CODEC, PNG_FORMAT, Codec, Encoding
from shared.base.formats import TileFormat
from shared.base.grid import RenderArea, TileAddress
from shared.base.png import png_avg
from shared.mapnik_env import mapnik
from shared.tiles.metatile import Metatile
from shared.tiles.render import TileRenderer
from tests.layers import decode
from tests.styles import write_countries

#: zoom 5 from the South Pacific to Antarctica: open sea (nothing drawn), the inside of
#: Antarctica (one colour), coasts, and a named country
BLOCK = Metatile(5, 0, 24, 7, 31)
CODECS = {
    "png": PNG_CODEC,
    "webp": Encoding().codec(TileFormat.WEBP),
    "webp-lossless": Encoding(webp_lossless=True).codec(TileFormat.WEBP),
    "jpg": Encoding().codec(TileFormat.JPEG),
}


@pytest.fixture(scope="module")
def countries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TileRenderer]:
    """A renderer of the styles ``plain`` and ``labelled`` of the demo countries."""
    folder = tmp_path_factory.mktemp("encoder-styles")
    write_countries(folder)
    with TileRenderer(folder) as renderer:
        yield renderer


def drawn(renderer: TileRenderer, area: RenderArea, buffer: int = 0) -> Any:
    """The image the renderer draws of ``area``, drawn again (Mapnik draws the same pixels
    every time; the image a tile was cut from is changed by compositing JPEG's background)."""
    return renderer._draw("labelled", "en", area, buffer)


def mapniks(
    image: Any, corners: list[tuple[int, int]], side: int, codec: Codec
) -> list[tuple[bytes, bool]]:
    """Mapnik's bytes of the ``side`` px tiles at ``corners`` of ``image`` (over white for
    JPEG), and whether each is empty, as tiles were cut before the fast paths."""
    painted = image.painted()
    empty = [
        not painted or (image.view(x, y, side, side).is_solid() and image.get_pixel(x, y) == 0)
        for x, y in corners
    ]
    flat = image
    if not codec.format.has_alpha:  # (compositing changes ``image``: once)
        flat = mapnik.Image(image.width(), image.height())
        flat.fill(mapnik.Color(*JPEG_BACKGROUND))
        flat.composite(image)
    data = [flat.view(x, y, side, side).to_string(codec.options) for x, y in corners]
    return list(zip(data, empty, strict=True))


def same_tile(ours: tuple[bytes, bool], own: tuple[bytes, bool], codec: Codec) -> bool:
    """Whether a tile is Mapnik's (``own``): its bytes, or for PNG its pixels in no more bytes."""
    if codec is not PNG_CODEC:
        return ours == own
    pixels = np.array_equal(decode(ours[0]), decode(own[0]))
    return pixels and len(ours[0]) <= len(own[0]) and ours[1] == own[1]


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
def test_every_tile_of_a_metatile_is_mapniks(countries: TileRenderer, codec: Codec) -> None:
    countries.solid.clear()

    tiles = dict(
        countries.render_metatile("labelled", "en", BLOCK, list(BLOCK.tiles()), codec, 1, 128)
    )

    area, cut = BLOCK.area(256, 1, 128)
    image = drawn(countries, area, 128)
    corners = [BLOCK.offset(tile, cut) for tile in tiles]
    solid = [image.view(x, y, 256, 256).is_solid() for x, y in corners]
    kinds = {"empty": 0, "one colour": 0, "more": 0}
    expected = mapniks(image, corners, 256, codec)
    for (tile, rendered), one_colour, own in zip(tiles.items(), solid, expected, strict=True):
        assert same_tile((rendered.data, rendered.empty), own, codec), tile
        assert rendered.solid == one_colour, tile
        kinds["empty" if rendered.empty else "one colour" if one_colour else "more"] += 1
    assert min(kinds.values()) >= 10, kinds
    if codec is PNG_CODEC:  # and GDAL reads the pixels drawn
        pixels = np.frombuffer(image.to_string(), np.uint8).reshape(area.height, -1, 4)
        x, y = BLOCK.offset(TileAddress(5, 3, 27), cut)
        assert np.array_equal(
            decode(tiles[TileAddress(5, 3, 27)].data),
            pixels[y : y + 256, x : x + 256].transpose(2, 0, 1),
        )


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
@pytest.mark.parametrize("scale", [1, 2], ids=["1x", "2x"])
def test_a_tile_drawn_alone_is_mapniks(countries: TileRenderer, codec: Codec, scale: int) -> None:
    # the open sea, Antarctica's inside, a coast, Europe (named)
    tiles = [TileAddress(5, 1, 25), TileAddress(5, 2, 30), TileAddress(5, 3, 27)]
    tiles += [TileAddress(4, 8, 5)]

    for tile in tiles:
        rendered = countries.render_tile("labelled", "en", tile, codec, scale)
        (own,) = mapniks(drawn(countries, tile.area(256, scale)), [(0, 0)], 256 * scale, codec)
        assert same_tile((rendered.data, rendered.empty), own, codec), tile


def test_a_colour_is_encoded_once_per_process_and_reused(
    countries: TileRenderer, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[tuple[int, int]] = []
    encode = Cutter._encode

    def spy(self: Cutter, x: int, y: int, width: int, height: int) -> bytes:
        encoded.append((x, y))
        return encode(self, x, y, width, height)

    monkeypatch.setattr(Cutter, "_encode", spy)
    countries.solid.clear()

    tiles = dict(countries.render_metatile("labelled", "en", BLOCK, list(BLOCK.tiles())))

    area, cut = BLOCK.area(256)
    image = drawn(countries, area)
    corners = {tile: BLOCK.offset(tile, cut) for tile in tiles}
    solid = [t for t, (x, y) in corners.items() if image.view(x, y, 256, 256).is_solid()]
    colours = {image.get_pixel(*corners[t]) for t in solid}
    assert len(solid) >= 20
    assert len(colours) == 2  # the sea and Antarctica's inside
    assert len(encoded) == len(tiles) - len(solid) + len(colours)
    assert len(countries.solid) == 2
    by_colour = {image.get_pixel(*corners[t]): tiles[t].data for t in solid}
    assert all(tiles[t].data == by_colour[image.get_pixel(*corners[t])] for t in solid)
    # a tile of the open sea drawn alone later: its bytes are taken, not encoded
    encoded.clear()
    sea = countries.render_tile("labelled", "en", TileAddress(5, 1, 25))
    assert (encoded, sea.empty, sea.data) == ([], True, by_colour[0])


def test_png_avg_is_lossless_at_every_size_for_gdal_and_mapnik() -> None:
    rng = np.random.default_rng(7)
    for width, height in ((256, 256), (512, 512), (300, 300), (64, 64), (40, 40), (7, 3)):
        pixels = rng.integers(0, 256, (height, width, 4), dtype=np.uint8)
        pixels[: height // 3] = 0  # transparent rows
        pixels[height // 2 :, :, 3] = 200  # half-transparent: colours kept (not premultiplied)
        pixels[height // 2 :, : width // 2, :3] = (10, 200, 30)

        data = png_avg(pixels)

        assert np.array_equal(decode(data), pixels.transpose(2, 0, 1)), (width, height)
        image = mapnik.Image.from_buffer(data)
        assert not image.premultiplied()
        own = np.frombuffer(image.to_string(), np.uint8).reshape(height, width, 4)
        assert np.array_equal(own, pixels), (width, height)


def test_a_map_tile_is_smaller_than_mapniks_png(countries: TileRenderer) -> None:
    # Europe at zoom 4, named: lines, fills, text; zlib-ng's level 2 against Mapnik's zlib 1
    image = drawn(countries, TileAddress(4, 8, 5).area(256))

    ours = countries.render_tile("labelled", "en", TileAddress(4, 8, 5)).data

    assert len(ours) < len(image.to_string(PNG_FORMAT))


def test_a_small_image_is_ours_and_a_premultiplied_one_mapniks(countries: TileRenderer) -> None:
    area = RenderArea(TileAddress(4, 8, 5).bounds_3857(), 40, 40)

    small = countries.render("labelled", "en", area)

    assert small.data.startswith(b"\x89PNG")
    assert np.array_equal(decode(small.data), decode(drawn(countries, area).to_string("png32")))
    image = drawn(countries, TileAddress(4, 8, 5).area(256))
    image.premultiply()
    cutter = Cutter(image, PNG_CODEC, SolidTiles())
    assert not cutter.numpy_png
    assert cutter.tile(0, 0, 256, 256).data == image.to_string(PNG_FORMAT)


def test_the_one_colour_tiles_forget_the_oldest_past_their_limit() -> None:
    solid = SolidTiles(limit=2)
    calls: list[int] = []

    def encode(colour: int) -> bytes:
        calls.append(colour)
        return bytes([colour])

    for colour in (1, 2, 1, 3, 1, 2):
        assert solid.get(("png", 256, 256, colour), functools.partial(encode, colour)) == bytes(
            [colour]
        )

    # 1 and 2 kept, 1 reused; 3 pushed 1 out (the oldest), then 1 pushed 2 out
    assert calls == [1, 2, 3, 1, 2]
    assert len(solid) == 2
    solid.clear()
    assert len(solid) == 0


@pytest.mark.parametrize("clear", [0, 5, 40_000], ids=["opaque", "a-few-clear", "mostly-clear"])
def test_pixels_over_a_background_composite_each_pixel_alike(clear: int) -> None:
    """Opaque pixels stay as they are, the others are composited (a few one by one, many in
    one pass): each pixel is ``(rgb * a + background * (255 - a) + 127) // 255``, written as an
    RGB PNG."""
    rng = np.random.default_rng(clear)
    pixels = rng.integers(0, 256, (200, 256, 4), dtype=np.uint8)
    pixels[..., 3] = 255
    at = rng.choice(pixels.shape[0] * pixels.shape[1], clear, replace=False)
    pixels.reshape(-1, 4)[at, 3] = rng.integers(0, 255, clear, dtype=np.uint8)
    background = (10, 200, 255)
    png = Cutter.of_pixels(pixels.copy(), PNG_CODEC, SolidTiles(), background).tile(0, 0, 256, 200)
    got = np.moveaxis(decode(png.data), 0, -1)
    alpha = pixels[..., 3:4].astype(np.uint16)
    expected = (
        pixels[..., :3] * alpha + np.array(background, np.uint16) * (255 - alpha) + 127
    ) // 255
    assert got.shape == (200, 256, 3)  # an RGB PNG: opaque
    assert np.array_equal(got, expected)
