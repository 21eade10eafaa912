"""Rendering tiles with Mapnik from a style and a raster made in the test, pixel by pixel."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from shared.base.grid import TileAddress
from shared.errors import UnprocessableError
from shared.raster.paths import encode_id
from shared.raster.style import StyleSpec, style_xml
from shared.tiles.render import TileRenderer
from tests.layers import decode
from tests.rasters import write_raster

#: the raster covers this tile exactly, one raster pixel per tile pixel
TILE = TileAddress(2, 1, 1)
RED, BLUE = (200, 30, 30), (30, 30, 200)
STYLE = encode_id("unit/halves.tif")


def halves(top_nodata: int = 0) -> np.ndarray:
    """Red west half, blue east half; the top ``top_nodata`` rows nodata (0)."""
    data = np.zeros((3, 256, 256), np.uint8)
    data[:, :, :128] = np.array(RED, np.uint8)[:, None, None]
    data[:, :, 128:] = np.array(BLUE, np.uint8)[:, None, None]
    data[:, :top_nodata] = 0
    return data


def write_style(root: Path, source: Path, style: str = STYLE) -> None:
    spec = StyleSpec(
        name=source.stem,
        bounds=list(TILE.bounds_4326()),
        zoom=2,
        srs="epsg:3857",
        source=source,
        preview=None,
        preview_min_scale=0.0,
        nodata=0.0,
    )
    path = root / "mapnik" / f"{style}.xml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(style_xml(spec, path.parent))


@pytest.fixture
def renderer(tmp_path: Path) -> Iterator[TileRenderer]:
    source = tmp_path / "raster" / "halves.tif"
    write_raster(source, halves(64), TILE.bounds_3857(), nodata=0)
    write_style(tmp_path, source)
    with TileRenderer(tmp_path / "mapnik") as renderer:
        yield renderer


def colour(pixels: np.ndarray, rgb: tuple[int, int, int]) -> np.ndarray:
    """Where ``pixels`` (bands, rows, columns) are exactly ``rgb`` and opaque."""
    where: np.ndarray = np.all(pixels == np.array([*rgb, 255])[:, None, None], axis=0)
    return where


def test_a_tile_has_the_rasters_pixels_and_nodata_is_transparent(renderer: TileRenderer) -> None:
    rendered = renderer.render_tile(STYLE, "en", TILE)

    pixels = decode(rendered.data)
    assert rendered.data.startswith(b"\x89PNG")
    assert not rendered.empty
    assert pixels.shape == (4, 256, 256)
    assert (pixels[3, :64] == 0).all()  # the nodata rows
    assert colour(pixels[:, 66:, :126], RED).all()  # away from the seams, exact colours
    assert colour(pixels[:, 66:, 130:], BLUE).all()


def test_a_deeper_tile_is_the_rasters_quarter_scaled_up(renderer: TileRenderer) -> None:
    # zoom 3, the south-west quarter of TILE: all red, 128 raster pixels over 256
    pixels = decode(renderer.render_tile(STYLE, "en", TileAddress(3, 2, 3)).data)

    assert colour(pixels[:, :250, :250], RED).all()


def test_a_tile_beside_the_raster_is_empty(renderer: TileRenderer) -> None:
    rendered = renderer.render_tile(STYLE, "en", TileAddress(2, 2, 1))

    assert rendered.empty
    assert not decode(rendered.data)[3].any()


def test_a_changed_style_is_loaded_again(renderer: TileRenderer, tmp_path: Path) -> None:
    assert colour(decode(renderer.render_tile(STYLE, "en", TILE).data), RED).any()
    blue = np.broadcast_to(np.array(BLUE, np.uint8)[:, None, None], (3, 256, 256)).copy()
    source = write_raster(tmp_path / "raster" / "blue.tif", blue, TILE.bounds_3857(), nodata=0)
    write_style(tmp_path, source)
    xml = tmp_path / "mapnik" / f"{STYLE}.xml"
    later = os.stat(xml).st_mtime_ns + 10**9
    os.utime(xml, ns=(later, later))

    pixels = decode(renderer.render_tile(STYLE, "en", TILE).data)

    assert colour(pixels[:, 2:-2, 2:-2], BLUE).all()


def test_a_raster_deleted_after_loading_is_an_error_not_a_stale_tile(
    renderer: TileRenderer, tmp_path: Path
) -> None:
    renderer.render_tile(STYLE, "en", TILE)
    (tmp_path / "raster" / "halves.tif").unlink()

    with pytest.raises(UnprocessableError, match=r"is gone \(halves.tif\); configure it again"):
        renderer.render_tile(STYLE, "en", TILE)
