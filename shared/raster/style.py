"""The Mapnik map configuration (XML) of a raster layer.

Up to three layers draw the raster, each over a band of scales: its preview (one tenth of the
resolution) where the map's pixels are at least 5 of the source's, its overviews where they are
at least 2 (a source without overviews of its own gets them in the build folder), and the source
itself at larger scales. A small raster has no preview; a raster with overviews of its own, or
one that fits in a tile, no separate overview layer. Every layer is drawn with the layer's
resampling. Paths are relative to the XML's folder, so the work dir can move between hosts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from shared.raster.resampling import DEFAULT_RESAMPLING, LayerResampling

__all__ = ["StyleSpec", "WEB_MERCATOR", "style_xml"]

WEB_MERCATOR = "epsg:3857"

#: Mapnik reads a raster at the resolution of the map, not twice it (its default for smooth
#: scalings): so it reads from the overview just finer than the map's pixels, as GDAL would.
_FILTER_FACTOR = "1"
#: Mapnik draws a layer at both ends of its range of scales (within 1e-6): the finer layer ends
#: this much below where the coarser begins, so that a map at exactly that scale (a raster
#: aligned with the tile grid at 2 or 5 map pixels a pixel) is drawn once, by the coarser one.
_GAP = 2e-6


@dataclass(frozen=True)
class StyleSpec:
    """What the XML of a layer says.

    ``preview`` is drawn at scales from ``preview_min_scale`` on, ``overviews`` from
    ``overview_min_scale`` up to the preview's, ``source`` below both.
    """

    name: str
    bounds: list[float]
    zoom: int
    srs: str
    source: Path
    preview: Path | None
    preview_min_scale: float
    nodata: float | None
    overviews: Path | None = None
    overview_min_scale: float = 0.0
    resampling: LayerResampling = DEFAULT_RESAMPLING
    #: how the tile server draws it (TiTiler's parameters as JSON; None: Mapnik, as imagery)
    rendering: dict[str, Any] | None = None
    #: the statistics of its bands (:func:`shared.raster.statistics.band_statistics`)
    statistics: list[dict[str, Any]] = field(default_factory=list)


def _layer(
    parent: ET.Element,
    name: str,
    spec: StyleSpec,
    path: Path,
    xml_dir: Path,
    scales: tuple[float | None, float | None],
) -> None:
    attrs = {"name": name, "srs": spec.srs}
    for attr, scale in zip(("minimum", "maximum"), scales, strict=True):
        if scale is not None:
            attrs[f"{attr}-scale-denominator"] = repr(scale)
    layer = ET.SubElement(parent, "Layer", attrs)
    ET.SubElement(layer, "StyleName").text = "raster"
    source = ET.SubElement(layer, "Datasource")
    params = {"type": "gdal", "file": os.path.relpath(path.resolve(), xml_dir.resolve())}
    if spec.nodata is not None:
        params["nodata"] = repr(spec.nodata)
    for key, value in params.items():
        ET.SubElement(source, "Parameter", name=key).text = value


def style_xml(spec: StyleSpec, xml_dir: Path) -> str:
    """The Mapnik XML of a raster layer, to be written into ``xml_dir``."""
    root = ET.Element("Map", {"srs": WEB_MERCATOR, "background-color": "transparent"})
    params = ET.SubElement(root, "Parameters")
    ET.SubElement(params, "Parameter", name="name").text = spec.name
    # read by the tile server: tiles outside these bounds are empty without rendering
    ET.SubElement(params, "Parameter", name="bounds").text = ",".join(map(repr, spec.bounds))
    # the zoom whose pixels match the raster's (speed test samples around it)
    ET.SubElement(params, "Parameter", name="zoom").text = str(spec.zoom)
    # read by the tile renderer (shared.tiles.render) and the TileJSON
    if spec.rendering is not None:
        ET.SubElement(params, "Parameter", name="rendering").text = json.dumps(spec.rendering)
    if spec.statistics:
        ET.SubElement(params, "Parameter", name="statistics").text = json.dumps(spec.statistics)
    style = ET.SubElement(root, "Style", name="raster")
    symbolizer = {"scaling": spec.resampling.mapnik, "filter-factor": _FILTER_FACTOR}
    ET.SubElement(ET.SubElement(style, "Rule"), "RasterSymbolizer", symbolizer)
    # the band of scales of each file, coarsest first: (file, layer name, from scale)
    bands: list[tuple[Path, str, float | None]] = [(spec.source, "raster", None)]
    if spec.overviews is not None:
        bands.insert(0, (spec.overviews, "overviews", spec.overview_min_scale))
    if spec.preview is not None:
        bands.insert(0, (spec.preview, "preview", spec.preview_min_scale))
    below: float | None = None  # where the coarser layer starts, the finer one ends
    for path, name, start in bands:
        _layer(root, name, spec, path, xml_dir, (start, None if below is None else below - _GAP))
        below = start
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode")
