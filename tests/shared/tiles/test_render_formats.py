"""Rendering in each format and at ``@2x``: pixels of a raster made in the test, decoded by GDAL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from shared.base.encoding import JPEG_BACKGROUND, PNG_CODEC, Encoding
from shared.base.formats import TileFormat
from shared.base.grid import TileAddress
from shared.tiles.render import TileRenderer
from tests.layers import decode
from tests.rasters import write_raster
from tests.shared.tiles.test_render import BLUE, RED, STYLE, TILE, halves, write_style

#: rows of nodata at the top of the raster (transparent, or the JPEG background)
NODATA_ROWS = 64


@pytest.fixture
def renderer(tmp_path: Path) -> Iterator[TileRenderer]:
    source = tmp_path / "raster" / "halves.tif"
    write_raster(source, halves(NODATA_ROWS), TILE.bounds_3857(), nodata=0)
    write_style(tmp_path, source)
    with TileRenderer(tmp_path / "mapnik") as renderer:
        yield renderer


def near(pixels: np.ndarray, rgb: tuple[int, ...], tolerance: int) -> np.ndarray:
    """Where the first bands of ``pixels`` are within ``tolerance`` of ``rgb``."""
    diff = np.abs(pixels[: len(rgb)].astype(int) - np.array(rgb)[:, None, None])
    where: np.ndarray = (diff <= tolerance).all(axis=0)
    return where


def inside(pixels: np.ndarray, scale: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The nodata band, the red half and the blue half below it, away from their borders."""
    margin = 4 * scale
    top = pixels[:, : NODATA_ROWS * scale - margin]
    below = pixels[:, NODATA_ROWS * scale + margin :]
    half = pixels.shape[2] // 2
    return top, below[:, :, : half - margin], below[:, :, half + margin :]


def test_lossless_webp_has_the_pngs_pixels_in_fewer_bytes(renderer: TileRenderer) -> None:
    png = renderer.render_tile(STYLE, "en", TILE)
    codec = Encoding(webp_lossless=True).codec(TileFormat.WEBP)
    webp = renderer.render_tile(STYLE, "en", TILE, codec)
    assert webp.data.startswith(b"RIFF")
    png_pixels, webp_pixels = decode(png.data), decode(webp.data)
    assert (webp_pixels[3] == png_pixels[3]).all()
    drawn = png_pixels[3] > 0
    assert (webp_pixels[:3, drawn] == png_pixels[:3, drawn]).all()
    assert len(webp.data) < len(png.data)
    assert png.empty is webp.empty is False


def test_lossy_webp_is_close_and_keeps_transparency(renderer: TileRenderer) -> None:
    webp = decode(renderer.render_tile(STYLE, "en", TILE, Encoding().codec(TileFormat.WEBP)).data)
    top, red, blue = inside(webp)
    assert not top[3].any()
    assert near(red, (*RED, 255), 8).all()
    assert near(blue, (*BLUE, 255), 8).all()


def test_jpeg_shows_the_background_where_the_map_is_transparent(renderer: TileRenderer) -> None:
    rendered = renderer.render_tile(STYLE, "en", TILE, Encoding().codec(TileFormat.JPEG))
    assert rendered.data.startswith(b"\xff\xd8")
    pixels = decode(rendered.data)
    assert pixels.shape == (3, 256, 256)
    top, red, blue = inside(pixels)
    assert near(top, JPEG_BACKGROUND, 2).all()
    assert near(red, RED, 8).all()
    assert near(blue, BLUE, 8).all()
    assert rendered.empty is False


@pytest.mark.parametrize("tile_format", list(TileFormat))
def test_a_2x_tile_is_the_same_map_at_twice_the_pixels(
    renderer: TileRenderer, tile_format: TileFormat
) -> None:
    codec = Encoding().codec(tile_format)
    pixels = decode(renderer.render_tile(STYLE, "en", TILE, codec, scale=2).data)
    assert pixels.shape[1:] == (512, 512)
    top, red, blue = inside(pixels, scale=2)
    assert near(red, RED, 8).all()
    assert near(blue, BLUE, 8).all()
    if tile_format.has_alpha:
        assert not top[3].any()
    else:
        assert near(top, JPEG_BACKGROUND, 2).all()


def test_a_tile_with_nothing_drawn_is_empty_in_every_format(renderer: TileRenderer) -> None:
    outside = TileAddress(2, 2, 1)  # next to the raster
    for codec in (PNG_CODEC, Encoding().codec(TileFormat.WEBP), Encoding().codec(TileFormat.JPEG)):
        assert renderer.render_tile(STYLE, "en", outside, codec).empty
