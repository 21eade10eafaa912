"""Overviews of a layer's source: their levels, their VRT, the resampling, and nothing beside
the source."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.enums import Resampling

from shared.errors import UnprocessableError
from shared.raster import overviews
from shared.raster.overviews import (
    OVERVIEWS_VRT,
    build_overviews,
    has_overviews,
    overview_factors,
)
from tests.rasters import write_raster

UTM = "EPSG:32618"


def quiet(text: str, done: float) -> None:
    """A progress that tells no one."""


@pytest.mark.parametrize(
    ("size", "factors"),
    [
        ((12000, 12000), [2, 4, 8, 16, 32, 64]),  # 12000 / 64 = 188 px: fits in a tile
        ((791, 718), [2, 4]),
        ((50000, 300), [2, 4, 8, 16, 32, 64, 128, 256]),  # the longer side decides
        ((257, 10), [2]),
        ((256, 256), []),  # a tile already
    ],
)
def test_levels_halve_until_one_fits_in_a_tile(size: tuple[int, int], factors: list[int]) -> None:
    assert overview_factors(*size) == factors


def blocks(rows: int, cols: int, seed: int = 3) -> np.ndarray:
    """Three bands of distinct values in 2 x 2 blocks (a reduction by two keeps each block)."""
    cells = np.random.default_rng(seed).integers(1, 255, (3, rows // 2, cols // 2), np.uint8)
    return np.repeat(np.repeat(cells, 2, axis=1), 2, axis=2)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_raster(
        tmp_path / "raster" / "scene.tif", blocks(600, 1000), (0, 0, 10000, 6000), UTM
    )


def test_levels_and_their_vrt_are_written_into_the_build_folder(
    tmp_path: Path, source: Path
) -> None:
    build = tmp_path / "derived" / "b-1"
    build.mkdir(parents=True)
    said: list[tuple[str, float]] = []

    vrt = build_overviews(source, build, Resampling.nearest, lambda *line: said.append(line))

    assert vrt == build / OVERVIEWS_VRT
    assert sorted(p.name for p in build.iterdir()) == [
        "overview-2.tif",
        "overview-4.tif",
        OVERVIEWS_VRT,
    ]
    assert [p.name for p in source.parent.iterdir()] == ["scene.tif"]  # nothing beside it
    assert ("Overview 1/2: 1/2 -> 500x300", pytest.approx(0.8)) in said
    assert said[-1] == ("Overview 2/2: 1/4 -> 250x150", 1.0)
    with rasterio.open(vrt) as ds, rasterio.open(source) as src:
        assert ds.overviews(1) == [2, 4]
        assert (ds.crs, ds.transform, ds.shape) == (src.crs, src.transform, src.shape)
        assert np.array_equal(ds.read(), src.read())  # full resolution: the source itself
        # a reduced read comes from the first level: every second pixel of the source
        assert np.array_equal(ds.read(out_shape=(3, 300, 500)), src.read()[:, ::2, ::2])
    text = vrt.read_text()
    assert 'relativeToVRT="1">../../raster/scene.tif<' in text  # the work dir can move
    assert 'relativeToVRT="1">overview-2.tif<' in text


@pytest.mark.parametrize(
    ("resampling", "source_values"), [(Resampling.nearest, True), (Resampling.bilinear, False)]
)
def test_nearest_levels_keep_the_source_values_and_bilinear_ones_blend_them(
    tmp_path: Path, resampling: Resampling, source_values: bool
) -> None:
    data = np.random.default_rng(4).integers(0, 255, (3, 600, 1000), np.uint8)
    source = write_raster(tmp_path / "scene.tif", data, (0, 0, 10000, 6000), UTM)
    build = tmp_path / "b-1"
    build.mkdir()

    build_overviews(source, build, resampling, quiet)

    with rasterio.open(build / "overview-4.tif") as level:
        assert level.shape == (150, 250)
        assert _subsampled(level.read(1), data[0]) is source_values


def _subsampled(level: np.ndarray, band: np.ndarray) -> bool:
    """Whether each pixel of ``level`` is one of the 4 x 4 source pixels it stands for."""
    rows, cols = level.shape
    cells = band[: rows * 4, : cols * 4].reshape(rows, 4, cols, 4).transpose(0, 2, 1, 3)
    return bool((cells == level[:, :, None, None]).any(axis=(2, 3)).all())


def test_strips_leave_no_seams(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, strips = tmp_path / "whole", tmp_path / "strips"
    for build in (whole, strips):
        build.mkdir()
    build_overviews(source, whole, Resampling.cubic, quiet)
    monkeypatch.setattr(overviews, "_STRIP_BYTES", 1)  # one strip of 512 rows at a time
    build_overviews(source, strips, Resampling.cubic, quiet)

    for name in ("overview-2.tif", "overview-4.tif"):
        with rasterio.open(whole / name) as a, rasterio.open(strips / name) as b:
            assert np.array_equal(a.read(), b.read()), name


def test_a_raster_that_fits_in_a_tile_gets_none(tmp_path: Path) -> None:
    tiny = write_raster(tmp_path / "tiny.tif", blocks(200, 256), (0, 0, 256, 200), UTM)
    build = tmp_path / "b-1"
    build.mkdir()

    assert build_overviews(tiny, build, Resampling.bilinear, quiet) is None
    assert list(build.iterdir()) == []


def test_a_source_with_overviews_of_its_own_is_known(tmp_path: Path, source: Path) -> None:
    assert not has_overviews(source)
    own = tmp_path / "own.tif"
    shutil.copyfile(source, own)
    with rasterio.open(own, "r+") as ds:
        ds.build_overviews([2, 4], Resampling.average)

    assert has_overviews(own)


def test_an_unreadable_source_is_refused_with_its_name(tmp_path: Path) -> None:
    data = np.random.default_rng(6).integers(0, 255, (3, 1024, 1024), dtype=np.uint8)
    cut = write_raster(tmp_path / "cut.tif", data, (0, 0, 1024, 1024), UTM, tiled=True)
    cut.write_bytes(cut.read_bytes()[:-50000])  # its last blocks are gone
    build = tmp_path / "b-1"
    build.mkdir()

    with pytest.raises(UnprocessableError, match=r"^cut.tif: "):
        build_overviews(cut, build, Resampling.bilinear, quiet)
    assert list(build.iterdir()) == []  # no level, no temporary file, no VRT
