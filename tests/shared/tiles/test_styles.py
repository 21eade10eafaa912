"""Styles as the tile server reads them: ids that name one file, bounds, zoom and layer CRS."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.errors import InvalidInputError, NotFoundError, UnprocessableError
from shared.raster.paths import MAX_ID_CHARS, encode_id
from shared.raster.style import StyleSpec, style_xml
from shared.tiles.styles import check_style_id, read_style, style_path

UTM = "+proj=utm +zone=18 +datum=WGS84 +units=m +no_defs"


def write_style(mapnik_dir: Path, style: str, bounds: list[float]) -> Path:
    spec = StyleSpec(
        name="scene",
        bounds=bounds,
        zoom=11,
        srs=UTM,
        source=mapnik_dir.parent / "raster" / "scene.tif",
        preview=None,
        preview_min_scale=0.0,
        nodata=None,
    )
    mapnik_dir.mkdir(parents=True, exist_ok=True)
    path = mapnik_dir / f"{style}.xml"
    path.write_text(style_xml(spec, mapnik_dir))
    return path


def test_a_style_gives_its_bounds_zoom_and_layer_crs(tmp_path: Path) -> None:
    style = encode_id("unit/bounds.tif")
    path = write_style(tmp_path / "mapnik", style, [-78.9586, 23.565, -76.5749, 25.5509])

    info = read_style(tmp_path / "mapnik", style)

    assert (info.style, info.path) == (style, path)
    assert info.bounds == [-78.9586, 23.565, -76.5749, 25.5509]
    assert info.footprint == info.bounds
    assert (info.zoom, info.layer_srs) == (11, UTM)


def test_a_changed_style_file_is_read_again(tmp_path: Path) -> None:
    style = encode_id("unit/changed.tif")
    path = write_style(tmp_path / "mapnik", style, [1.0, 2.0, 3.0, 4.0])
    assert read_style(tmp_path / "mapnik", style).bounds == [1.0, 2.0, 3.0, 4.0]

    write_style(tmp_path / "mapnik", style, [5.0, 6.0, 7.0, 8.0])
    later = os.stat(path).st_mtime_ns + 10**9
    os.utime(path, ns=(later, later))

    assert read_style(tmp_path / "mapnik", style).bounds == [5.0, 6.0, 7.0, 8.0]


def test_a_style_without_bounds_covers_the_web_mercator_world(tmp_path: Path) -> None:
    style = encode_id("unit/world.tif")
    (tmp_path / f"{style}.xml").write_text('<Map srs="epsg:3857"><Parameters/></Map>')

    info = read_style(tmp_path, style)

    assert (info.bounds, info.zoom, info.layer_srs) == (None, None, None)
    assert info.footprint == [-180.0, -85.0, 180.0, 85.0]


def test_a_missing_or_broken_style_is_an_error_naming_it(tmp_path: Path) -> None:
    missing, broken = encode_id("unit/missing.tif"), encode_id("unit/broken.tif")
    (tmp_path / f"{broken}.xml").write_text("<Map><Parameters>")

    with pytest.raises(NotFoundError, match=f"no map configuration '{missing}'"):
        read_style(tmp_path, missing)
    with pytest.raises(UnprocessableError, match=f"the map configuration '{broken}' is not valid"):
        read_style(tmp_path, broken)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "a.xml", "a b", "x" * 241])
def test_a_name_that_could_lead_elsewhere_is_not_a_style(tmp_path: Path, name: str) -> None:
    (tmp_path / "a.xml.xml").write_text("<Map/>")  # would be found, were the name taken

    with pytest.raises(InvalidInputError, match="a style is a layer id"):
        check_style_id(name)
    with pytest.raises(InvalidInputError):
        style_path(tmp_path, name)


def test_a_layer_id_is_a_style_up_to_the_longest_id() -> None:
    assert MAX_ID_CHARS == 240
    assert check_style_id("c2luZ2xlL1JHQi5ieXRlLnRpZg") == "c2luZ2xlL1JHQi5ieXRlLnRpZg"
    assert check_style_id("-_" * 120) == "-_" * 120
