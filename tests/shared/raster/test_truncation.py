"""The truncated-raster check: blocks past the end of the file, at full size and in overviews."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
import rasterio.shutil
from rasterio.errors import RasterioIOError

from shared.raster.gdal import gdal_message
from shared.raster.truncation import Level, check_not_truncated, overview_levels
from tests.rasters import write_raster


@pytest.fixture
def scene(tmp_path: Path) -> Path:
    """A 512 x 512 tiled GeoTIFF, uncompressed: four 64 KiB blocks."""
    data = np.random.default_rng(7).integers(0, 255, (1, 512, 512), dtype=np.uint8)
    return write_raster(
        tmp_path / "scene.tif",
        data,
        (0.0, 0.0, 512.0, 512.0),
        tiled=True,
        blockxsize=256,
        blockysize=256,
    )


def cut(path: Path, target: Path, nbytes: int) -> Path:
    target.write_bytes(path.read_bytes()[:-nbytes])
    return target


def test_a_whole_file_passes_and_a_cut_one_fails_on_its_last_block(
    scene: Path, tmp_path: Path
) -> None:
    with rasterio.open(scene) as ds:
        check_not_truncated(ds)
    with rasterio.open(cut(scene, tmp_path / "cut.tif", 1000)) as ds:
        with pytest.raises(RasterioIOError) as caught:
            check_not_truncated(ds)
    message = gdal_message(caught.value)
    assert "IReadBlock failed at X offset 1, Y offset 1" in message
    assert "got 64536 bytes, expected 65536" in message


def test_overview_levels_and_a_cut_overview_is_found(scene: Path, tmp_path: Path) -> None:
    with_overviews = tmp_path / "overviews.tif"
    shutil.copyfile(scene, with_overviews)
    with rasterio.open(with_overviews, "r+") as ds:
        ds.build_overviews([2, 4])
    with rasterio.open(with_overviews) as ds:
        assert overview_levels(ds) == [
            Level(0, 256, 256, [(256, 256)]),
            Level(1, 128, 128, [(256, 256)]),
        ]
        check_not_truncated(ds)

    # the overviews come last in the file: cutting its end leaves every full-size block whole
    with rasterio.open(cut(with_overviews, tmp_path / "cut.tif", 100)) as ds:
        assert ds.read().shape == (1, 512, 512)
        with pytest.raises(RasterioIOError) as caught:
            check_not_truncated(ds)
    assert "got 65436 bytes, expected 65536" in gdal_message(caught.value)


def test_other_formats_pass_unchecked(scene: Path, tmp_path: Path) -> None:
    vrt = tmp_path / "scene.vrt"
    with rasterio.open(scene) as ds:
        rasterio.shutil.copy(ds, vrt, driver="VRT")
    cut(scene, scene, 1000)  # the VRT's source, cut

    with rasterio.open(vrt) as ds:
        assert ds.driver == "VRT"
        check_not_truncated(ds)
