"""The Mapnik map configuration (XML) of a raster layer.

Two layers draw the raster: its preview (one tenth of the resolution) at low zooms, the
source itself at high zooms; a small raster is drawn from its source at every zoom. Paths are
relative to the XML's folder, so the work dir can move between hosts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

__all__ = ["StyleSpec", "WEB_MERCATOR", "style_xml"]

WEB_MERCATOR = "epsg:3857"


@dataclass(frozen=True)
class StyleSpec:
    """What the XML of a layer says."""

    name: str
    bounds: list[float]
    zoom: int
    srs: str
    source: Path
    preview: Path | None
    preview_min_scale: float
    nodata: float | None


def _layer(
    parent: ET.Element,
    name: str,
    spec: StyleSpec,
    path: Path,
    xml_dir: Path,
    scale_attr: tuple[str, str] | None,
) -> None:
    attrs = {"name": name, "srs": spec.srs}
    if scale_attr is not None:
        attrs[scale_attr[0]] = scale_attr[1]
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
    style = ET.SubElement(root, "Style", name="raster")
    ET.SubElement(ET.SubElement(style, "Rule"), "RasterSymbolizer", scaling="bilinear")
    if spec.preview is None:
        _layer(root, "raster", spec, spec.source, xml_dir, None)
    else:
        scale = repr(spec.preview_min_scale)
        _layer(root, "preview", spec, spec.preview, xml_dir, ("minimum-scale-denominator", scale))
        _layer(root, "raster", spec, spec.source, xml_dir, ("maximum-scale-denominator", scale))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode")
