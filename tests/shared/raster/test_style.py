"""The Mapnik XML of a raster layer: its parameters, its layers and their relative paths."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

from shared.raster.style import StyleSpec, style_xml

UTM = "+proj=utm +zone=18 +datum=WGS84 +units=m +no_defs"
BOUNDS = [-78.9586, 23.565, -76.5749, 25.5509]


def spec(source: Path, preview: Path | None = None, nodata: float | None = 0.0) -> StyleSpec:
    return StyleSpec(
        name="scene",
        bounds=BOUNDS,
        zoom=11,
        srs=UTM,
        source=source,
        preview=preview,
        preview_min_scale=54582.5,
        nodata=nodata,
    )


def layers(xml: str) -> list[tuple[dict[str, str], dict[str, str | None]]]:
    """Each layer's attributes and datasource parameters."""
    root = ET.fromstring(xml)
    return [
        (dict(layer.attrib), {p.get("name", ""): p.text for p in layer.iter("Parameter")})
        for layer in root.findall("Layer")
    ]


def test_a_small_raster_is_one_layer_drawn_from_its_source(tmp_path: Path) -> None:
    xml = style_xml(spec(tmp_path / "raster" / "single" / "scene.tif"), tmp_path / "mapnik")

    root = ET.fromstring(xml)
    assert root.attrib == {"srs": "epsg:3857", "background-color": "transparent"}
    assert {p.get("name"): p.text for p in root.findall("Parameters/Parameter")} == {
        "name": "scene",
        "bounds": "-78.9586,23.565,-76.5749,25.5509",
        "zoom": "11",
    }
    assert root.find("Style/Rule/RasterSymbolizer").attrib == {"scaling": "bilinear"}  # type: ignore[union-attr]
    assert layers(xml) == [
        (
            {"name": "raster", "srs": UTM},
            {"type": "gdal", "file": "../raster/single/scene.tif", "nodata": "0.0"},
        )
    ]


def test_a_large_raster_draws_its_preview_above_a_scale_and_its_source_below(
    tmp_path: Path,
) -> None:
    source = tmp_path / "raster" / "scene.tif"
    preview = tmp_path / "derived" / "c2NlbmUudGlm" / "b-1" / "scene.tif"

    xml = style_xml(spec(source, preview, nodata=None), tmp_path / "mapnik")

    assert layers(xml) == [
        (
            {"name": "preview", "srs": UTM, "minimum-scale-denominator": "54582.5"},
            {"type": "gdal", "file": "../derived/c2NlbmUudGlm/b-1/scene.tif"},
        ),
        (
            {"name": "raster", "srs": UTM, "maximum-scale-denominator": "54582.5"},
            {"type": "gdal", "file": "../raster/scene.tif"},
        ),
    ]
