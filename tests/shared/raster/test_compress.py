"""Compressed copies: the spec's options, the first three bands, nothing left on failure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio

from shared.errors import UnprocessableError
from shared.raster.compress import compress_file, compressed_name
from tests.rasters import write_raster


def test_the_copy_of_a_vrt_gets_its_own_name() -> None:
    assert compressed_name(Path("x.tif")) == "x.tif"
    assert compressed_name(Path("x.TIFF")) == "x.TIFF"
    assert compressed_name(Path("x.vrt")) == "x.vrt.tif"  # never the copy of x.tif


def test_a_four_band_raster_becomes_an_lzw_bigtiff_of_its_first_three(tmp_path: Path) -> None:
    data = np.random.default_rng(5).integers(0, 255, (4, 64, 64), dtype=np.uint8)
    source = write_raster(tmp_path / "rgba.tif", data, (0, 0, 640, 640), "EPSG:32618")
    target = tmp_path / "commpress" / "rgba.tif"

    compress_file(source, target)

    with rasterio.open(target) as out:
        assert (out.count, out.crs.to_epsg(), out.bounds) == (3, 32618, (0, 0, 640, 640))
        assert (out.profile["compress"], out.profile["tiled"]) == ("lzw", True)
        assert out.tags(ns="IMAGE_STRUCTURE")["PREDICTOR"] == "2"
        assert [c.name for c in out.colorinterp] == ["red", "green", "blue"]
        assert np.array_equal(out.read(), data[:3])
    assert target.read_bytes()[:4] == b"II+\x00"  # BigTIFF
    assert [p.name for p in target.parent.iterdir()] == ["rgba.tif"]


def test_a_raster_that_cannot_be_copied_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    gray = write_raster(tmp_path / "gray.tif", np.zeros((1, 8, 8), np.uint8), (0, 0, 80, 80))
    data = np.random.default_rng(6).integers(0, 255, (3, 512, 512), dtype=np.uint8)
    cut = write_raster(tmp_path / "cut.tif", data, (0, 0, 512, 512), tiled=True)
    cut.write_bytes(cut.read_bytes()[:-5000])  # its last blocks are gone
    out = tmp_path / "commpress"

    with pytest.raises(UnprocessableError, match=r"gray.tif has 1 band\(s\)"):
        compress_file(gray, out / "gray.tif")
    # GDAL's reason, which depends on how it reads (one thread, or several: GDAL_NUM_THREADS)
    with pytest.raises(
        UnprocessableError, match=r"^cut.tif: .*(TIFFReadEncodedTile\(\) failed|Cannot read)"
    ):
        compress_file(cut, out / "cut.tif")

    assert list(out.iterdir()) == []  # no copy, no temporary file, no sidecar
