"""The resampling of a layer: its names in the API, in Mapnik's XML and for GDAL."""

from __future__ import annotations

import pytest
from rasterio.enums import Resampling

from shared.errors import InvalidInputError
from shared.raster.resampling import DEFAULT_RESAMPLING, LayerResampling, parse_resampling


@pytest.mark.parametrize(
    ("text", "mapnik", "gdal"),
    [
        ("nearest", "near", Resampling.nearest),
        ("bilinear", "bilinear", Resampling.bilinear),
        ("cubic", "bicubic", Resampling.cubic),
    ],
)
def test_each_method_has_its_mapnik_and_gdal_names(
    text: str, mapnik: str, gdal: Resampling
) -> None:
    resampling = parse_resampling(text)
    assert (resampling.value, resampling.mapnik, resampling.gdal) == (text, mapnik, gdal)


@pytest.mark.parametrize("text", [None, ""])
def test_absent_is_bilinear_as_every_layer_was(text: str | None) -> None:
    assert parse_resampling(text) is DEFAULT_RESAMPLING is LayerResampling.BILINEAR


@pytest.mark.parametrize("text", ["lanczos", "Nearest", "near", " cubic", "x" * 500])
def test_anything_else_names_the_parameter(text: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        parse_resampling(text)
    assert raised.value.message == "resampling must be one of nearest, bilinear, cubic"
    assert raised.value.detail == {"parameter": "resampling", "value": text[:32]}
