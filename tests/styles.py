"""Mapnik styles written in tests and benchmarks: the demo countries, filled, and named."""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

from shared.demo import DEMO_DATA

__all__ = ["COUNTRIES", "write_countries"]

#: the countries of the demo data (Natural Earth, low resolution), a shapefile in EPSG:4326
COUNTRIES = DEMO_DATA / "vector" / "naturalearth_lowres" / "naturalearth_lowres.shp"
_XML = """<?xml version="1.0" encoding="utf-8"?>
<Map srs="epsg:3857" background-color="transparent">
  <Style name="land"><Rule>
    <PolygonSymbolizer fill="#dfe8c8"/><LineSymbolizer stroke="#6d7f59" stroke-width="1"/>
  </Rule></Style>
  <Style name="labels"><Rule>
    <TextSymbolizer face-name="DejaVu Sans Book" size="13" fill="#202020" halo-fill="#ffffff"
      halo-radius="1.5" placement="interior">[name]</TextSymbolizer>
  </Rule></Style>
  <Layer name="countries" srs="epsg:4326">
    <StyleName>land</StyleName>{labels}
    <Datasource>{datasource}</Datasource>
  </Layer>
</Map>
"""


def write_countries(folder: Path, datasource: dict[str, str] | None = None) -> tuple[str, str]:
    """Styles of the countries in ``folder`` (made): ``plain`` (filled, outlined) and
    ``labelled`` (named too, in 13 px DejaVu Sans); their ids.

    ``datasource``: Mapnik's parameters of where the countries are (a ``name`` field, in
    EPSG:4326); the shapefile :data:`COUNTRIES` unless given.
    """
    params = datasource or {"type": "shape", "file": str(COUNTRIES)}
    xml_params = "".join(
        f'<Parameter name="{escape(k)}">{escape(v)}</Parameter>' for k, v in params.items()
    )
    folder.mkdir(parents=True, exist_ok=True)
    for name, labels in (("plain", ""), ("labelled", "<StyleName>labels</StyleName>")):
        (folder / f"{name}.xml").write_text(_XML.format(labels=labels, datasource=xml_params))
    return "plain", "labelled"
