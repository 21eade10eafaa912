"""The numpy drawing's reads: 8-bit bands resampled in bytes draw what the float path draws."""

from __future__ import annotations

import shutil
from pathlib import Path

import morecantile
import numpy as np
import pytest
import rasterio

from shared.base.grid import RenderArea
from shared.demo import DEMO_DATA
from shared.raster import draw
from shared.raster.draw import LayerDrawing, RasterDrawer
from shared.raster.rendering import Rendering
from shared.raster.resampling import LayerResampling

TMS = morecantile.tms.get("WebMercatorQuad")
#: the Landsat scene's tiles: its whole at z8, a corner with nodata at z9, inside at z10–13
TILES = [(8, 72, 110), (9, 145, 219), (10, 290, 440), (12, 1160, 1761), (13, 2321, 3522)]


@pytest.fixture(scope="module")
def scenes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The Landsat scene (RGB, nodata 0) and a copy of it with an alpha band instead."""
    folder = tmp_path_factory.mktemp("draw")
    rgb = folder / "rgb.tif"
    shutil.copy(DEMO_DATA / "raster" / "single" / "RGB.byte.tif", rgb)
    rgba = folder / "rgba.tif"
    with rasterio.open(rgb) as ds:
        data = ds.read()
        profile = ds.profile | {"count": 4, "nodata": None, "photometric": "RGB"}
    alpha = np.where((data == 0).all(axis=0), 0, 255).astype(np.uint8)
    alpha[:, 300:310] = 128  # a band of half-transparent pixels
    with rasterio.open(rgba, "w", **profile) as out:
        out.write(np.concatenate([data, alpha[np.newaxis]]))
        out.colorinterp = [*out.colorinterp[:3], rasterio.enums.ColorInterp.alpha]
    return {"rgb": rgb, "rgba": rgba}


@pytest.mark.parametrize("scene", ["rgb", "rgba"])
@pytest.mark.parametrize("how", ["nearest", "bilinear"])
def test_bytes_are_drawn_as_the_float_path_draws_them(
    scenes: dict[str, Path], scene: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    layer = LayerDrawing(scenes[scene], None, [], LayerResampling(how))
    asked = Rendering(bidx=(1, 2, 3))
    seen_bytes = 0
    for z, x, y in TILES:
        b = TMS.xy_bounds(morecantile.Tile(x, y, z))
        area = RenderArea((b.left, b.bottom, b.right, b.top), 256, 256)
        in_bytes = RasterDrawer().draw(layer, area, asked)
        with monkeypatch.context() as m:
            m.setattr(draw, "_as_they_are", lambda *_: False)
            in_floats = RasterDrawer().draw(layer, area, asked)
        assert in_bytes.shape == in_floats.shape == (256, 256, 4)
        assert in_floats[..., 3].any(), (z, x, y)
        opaque = (in_bytes[..., 3] > 0) & (in_floats[..., 3] > 0)
        assert np.array_equal(in_bytes[..., 3] > 0, in_floats[..., 3] > 0), (z, x, y)
        difference = np.abs(in_bytes.astype(int) - in_floats.astype(int))[opaque]
        # rounded apart by a level; beside a hole, where a few pixels weigh little, by a few
        assert np.percentile(difference, 99.9) <= 1, (z, x, y)
        assert difference.max() <= 4, (z, x, y)
        assert difference.mean() < 0.05, (z, x, y)
        seen_bytes += int((in_bytes[..., 3] == 0).any())
    assert seen_bytes  # some tile had transparent places: the rules for holes were used


def test_the_bytes_path_is_taken_for_8_bit_bands_as_they_are(
    scenes: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stretch, a colour map or a float band: the float path; 8-bit bands as they are: bytes."""
    calls: list[int] = []
    original = draw._resampled_bytes

    def counted(*args: object, **kwargs: object) -> np.ndarray | None:
        calls.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(draw, "_resampled_bytes", counted)
    layer = LayerDrawing(scenes["rgb"], None, [], LayerResampling.BILINEAR)
    b = TMS.xy_bounds(morecantile.Tile(290, 440, 10))
    area = RenderArea((b.left, b.bottom, b.right, b.top), 256, 256)
    drawer = RasterDrawer()
    for rendering, taken in (
        (Rendering(bidx=(1, 2, 3)), 1),
        (Rendering(bidx=(2,)), 1),
        (Rendering(bidx=(1,), rescale=((0.0, 100.0),)), 0),
        (Rendering(bidx=(1,), colormap_name="viridis"), 0),
    ):
        calls.clear()
        pixels = drawer.draw(layer, area, rendering)
        assert pixels[..., 3].any()
        assert len(calls) == taken, rendering
