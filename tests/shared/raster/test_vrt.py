"""Virtual rasters as XML: a mosaic of files that reads as the whole, a subset of bands."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest
import rasterio

from shared.errors import UnprocessableError
from shared.raster.vrt import band_subset_vrt, mosaic_vrt
from tests.rasters import write_raster

UTM = "EPSG:32618"


@pytest.fixture
def scene() -> np.ndarray:
    return np.random.default_rng(3).integers(1, 255, (3, 40, 60), dtype=np.uint8)


def test_a_mosaic_of_two_halves_reads_as_the_whole(tmp_path: Path, scene: np.ndarray) -> None:
    # 10 m pixels; the west half and the east half of one scene
    west = write_raster(tmp_path / "src" / "west.tif", scene[:, :, :30], (0, 0, 300, 400), UTM)
    east = write_raster(tmp_path / "src" / "east.tif", scene[:, :, 30:], (300, 0, 600, 400), UTM)
    vrt = tmp_path / "derived" / "mosaic.vrt"
    vrt.parent.mkdir()

    vrt.write_text(mosaic_vrt([west, east], vrt.parent))

    with rasterio.open(vrt) as ds:
        assert (ds.driver, ds.crs.to_epsg(), ds.res) == ("VRT", 32618, (10.0, 10.0))
        assert tuple(ds.bounds) == (0.0, 0.0, 600.0, 400.0)
        assert np.array_equal(ds.read(), scene)
    names = {e.text for e in ET.parse(vrt).getroot().iter("SourceFilename")}
    assert names == {"../src/west.tif", "../src/east.tif"}  # the work dir may move


def test_a_mosaic_refuses_files_that_do_not_fit(tmp_path: Path, scene: np.ndarray) -> None:
    a = write_raster(tmp_path / "a.tif", scene, (0, 0, 600, 400), UTM)
    wgs = write_raster(tmp_path / "wgs.tif", scene, (0, 0, 6, 4), "EPSG:4326")
    gray = write_raster(tmp_path / "gray.tif", scene[:1], (600, 0, 1200, 400), UTM)

    with pytest.raises(UnprocessableError, match="different coordinate systems") as caught:
        mosaic_vrt([a, wgs], tmp_path)
    assert caught.value.detail == {"file": "wgs.tif"}
    with pytest.raises(UnprocessableError, match="gray.tif has 1 band.s. of uint8, a.tif has 3"):
        mosaic_vrt([a, gray], tmp_path)


def test_a_band_subset_picks_reorders_and_clamps_to_bytes(tmp_path: Path) -> None:
    data = np.array([[[0, 100, 300]], [[5, 6, 7]], [[1000, 200, 50]]], np.uint16)  # 3 x 1 x 3
    source = write_raster(tmp_path / "wide.tif", data, (0, 0, 30, 10), UTM)

    xml = band_subset_vrt(source, [3, 1], "Byte", ["Red", "Green"])

    with rasterio.open(xml) as ds:
        assert (ds.count, ds.dtypes) == (2, ("uint8", "uint8"))
        assert [c.name for c in ds.colorinterp] == ["red", "green"]
        assert ds.read().tolist() == [[[255, 200, 50]], [[0, 100, 255]]]


def test_a_band_subset_needs_its_bands(tmp_path: Path, scene: np.ndarray) -> None:
    gray = write_raster(tmp_path / "gray.tif", scene[:1], (0, 0, 600, 400), UTM)

    with pytest.raises(UnprocessableError, match=r"1 band\(s\); band\(s\) \[2, 3\] are required"):
        band_subset_vrt(gray, [1, 2, 3], "Byte", ["Red", "Green", "Blue"])
