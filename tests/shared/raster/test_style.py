"""The Mapnik XML of a raster layer: its parameters, its layers, their scales and relative paths,
and the resampling it is drawn with."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from shared.mapnik_env import mapnik
from shared.raster.resampling import LayerResampling
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


def symbolizer(xml: str) -> dict[str, str]:
    found = ET.fromstring(xml).find("Style/Rule/RasterSymbolizer")
    assert found is not None
    return dict(found.attrib)


def test_a_small_raster_is_one_layer_drawn_from_its_source(tmp_path: Path) -> None:
    xml = style_xml(spec(tmp_path / "raster" / "single" / "scene.tif"), tmp_path / "mapnik")

    root = ET.fromstring(xml)
    assert root.attrib == {"srs": "epsg:3857", "background-color": "transparent"}
    assert {p.get("name"): p.text for p in root.findall("Parameters/Parameter")} == {
        "name": "scene",
        "bounds": "-78.9586,23.565,-76.5749,25.5509",
        "zoom": "11",
    }
    assert symbolizer(xml) == {"scaling": "bilinear", "filter-factor": "1"}
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
            {"name": "raster", "srs": UTM, "maximum-scale-denominator": "54582.499998"},
            {"type": "gdal", "file": "../raster/scene.tif"},
        ),
    ]


def test_overviews_are_drawn_between_the_preview_and_the_source(tmp_path: Path) -> None:
    source = tmp_path / "raster" / "scene.tif"
    build = tmp_path / "derived" / "c2NlbmUudGlm" / "b-1"
    full = dataclasses.replace(
        spec(source, build / "preview.tif", nodata=None),
        overviews=build / "overviews.vrt",
        overview_min_scale=21833.0,
    )

    xml = style_xml(full, tmp_path / "mapnik")

    assert layers(xml) == [
        (
            {"name": "preview", "srs": UTM, "minimum-scale-denominator": "54582.5"},
            {"type": "gdal", "file": "../derived/c2NlbmUudGlm/b-1/preview.tif"},
        ),
        (
            {
                "name": "overviews",
                "srs": UTM,
                "minimum-scale-denominator": "21833.0",
                "maximum-scale-denominator": "54582.499998",
            },
            {"type": "gdal", "file": "../derived/c2NlbmUudGlm/b-1/overviews.vrt"},
        ),
        (
            {"name": "raster", "srs": UTM, "maximum-scale-denominator": "21832.999998"},
            {"type": "gdal", "file": "../raster/scene.tif"},
        ),
    ]


def test_a_small_raster_with_overviews_has_no_preview(tmp_path: Path) -> None:
    source = tmp_path / "raster" / "scene.tif"
    small = dataclasses.replace(
        spec(source), overviews=tmp_path / "derived" / "x" / "overviews.vrt", overview_min_scale=9.5
    )

    names = [
        (attrs["name"], attrs.get("minimum-scale-denominator"))
        for attrs, _ in layers(style_xml(small, tmp_path / "mapnik"))
    ]

    assert names == [("overviews", "9.5"), ("raster", None)]


@pytest.mark.parametrize(
    ("resampling", "scaling"),
    [
        (LayerResampling.NEAREST, "near"),
        (LayerResampling.BILINEAR, "bilinear"),
        (LayerResampling.CUBIC, "bicubic"),
    ],
)
def test_the_symbolizer_scales_with_the_layers_resampling(
    tmp_path: Path, resampling: LayerResampling, scaling: str
) -> None:
    layer = dataclasses.replace(spec(tmp_path / "scene.tif"), resampling=resampling)

    # the map's resolution picks the overview: Mapnik reads no more pixels than the map has
    assert symbolizer(style_xml(layer, tmp_path)) == {"scaling": scaling, "filter-factor": "1"}


def test_a_map_at_a_boundary_scale_is_drawn_by_one_layer(tmp_path: Path) -> None:
    full = dataclasses.replace(
        spec(tmp_path / "scene.tif", tmp_path / "preview.tif"),
        overviews=tmp_path / "overviews.vrt",
        overview_min_scale=21833.0,
    )
    drawn = []
    for attrs, _ in layers(style_xml(full, tmp_path)):
        layer = mapnik.Layer(attrs["name"])
        for end in ("minimum", "maximum"):
            if f"{end}-scale-denominator" in attrs:
                setattr(layer, f"{end}_scale_denominator", float(attrs[f"{end}-scale-denominator"]))
        drawn.append(layer)

    def visible(scale: float) -> list[str]:  # as Mapnik decides it (within 1e-6 of each end)
        return [layer.name for layer in drawn if layer.visible(scale)]

    assert visible(54582.5) == ["preview"]  # the map's pixels exactly 5 of the source's
    assert visible(54582.49) == ["overviews"]
    assert visible(21833.0) == ["overviews"]  # exactly 2
    assert visible(21832.99) == ["raster"]
