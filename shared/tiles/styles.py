"""Map styles: the Mapnik XML files of ``<workDir>/map/mapnik``, and what tiles need of them."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from shared.base.grid import MAX_ZOOM
from shared.errors import InvalidInputError, NotFoundError, UnprocessableError
from shared.raster.paths import MAX_ID_CHARS, decode_id

__all__ = [
    "LANG_TOKEN",
    "StyleInfo",
    "check_style_id",
    "read_style",
    "style_ids",
    "style_path",
    "styles_drawing",
]

#: Written in a style's XML where the label language goes (``[name_{{lang}}]``); each
#: rendering replaces it with the requested language.
LANG_TOKEN = "{{lang}}"
_STYLE_ID = re.compile(rf"^[A-Za-z0-9_-]{{1,{MAX_ID_CHARS}}}$")


@dataclass(frozen=True)
class StyleInfo:
    """What the tile server reads from a style without Mapnik."""

    style: str
    path: Path
    mtime_ns: int
    bounds: list[float] | None
    zoom: int | None
    layer_srs: str | None
    #: how a raster layer is drawn (TiTiler's parameters; None: as imagery, by Mapnik)
    rendering: dict[str, Any] | None = None
    #: the statistics of a raster layer's bands
    statistics: list[dict[str, Any]] = field(default_factory=list)
    #: a raster layer's source (its file, or a folder's mosaic), None for a style of vectors
    source: Path | None = None
    #: the ``table`` parameters of its PostGIS datasources (a table, or a subquery)
    tables: tuple[str, ...] = ()

    def draws(self, schema: str, table: str) -> bool:
        """Whether one of its PostGIS datasources reads the table ``schema.table`` (named
        whole, or bare when its schema is ``public``; quoted or not)."""
        name = '"?' + re.escape(table) + '"?'
        whole = r'(?<![\w."])"?' + re.escape(schema) + r'"?\.' + name + r'(?![\w"])'
        bare = r'(?<![\w."])' + name + r'(?![\w".])'
        pattern = whole if schema != "public" else f"{whole}|{bare}"
        return any(re.search(pattern, text, re.IGNORECASE) for text in self.tables)

    @property
    def title(self) -> str:
        """The layer's title: the path of its raster, else (a style written by hand) its id."""
        try:
            return decode_id(self.style)
        except InvalidInputError:
            return self.style

    @property
    def band_count(self) -> int | None:
        """A raster layer's bands (one statistics entry each), when known."""
        return len(self.statistics) or None

    @property
    def maxzoom(self) -> int:
        """The layer's own zoom, where its pixels match the tiles' (``MAX_ZOOM`` when unknown):
        a client enlarges the tiles past it rather than ask for more (TiTiler's ``maxzoom``)."""
        return MAX_ZOOM if self.zoom is None else min(self.zoom, MAX_ZOOM)

    @property
    def footprint(self) -> list[float]:
        """Where the style has data (EPSG:4326): its bounds, else the Web Mercator world."""
        return list(self.bounds) if self.bounds else [-180.0, -85.0, 180.0, 85.0]


_cache: dict[str, StyleInfo] = {}


def check_style_id(style: str) -> str:
    """Refuse what is not a style id: empty, too long, or with anything but base64url letters.

    A style id names one folder of tiles and one XML file; this check is what keeps a name
    from naming a parent folder (``""``, ``..``, ``a/b``).

    Raises:
        InvalidInputError: the name is not a style id.
    """
    if not _STYLE_ID.fullmatch(style):
        raise InvalidInputError("a style is a layer id (URL-safe base64)", style=style[:64])
    return style


def style_path(mapnik_dir: Path, style: str) -> Path:
    """The XML file of ``style``.

    Raises:
        InvalidInputError: the name is not a style id.
        NotFoundError: no such style.
    """
    path = mapnik_dir / f"{check_style_id(style)}.xml"
    if not path.is_file():
        raise NotFoundError(
            f"no map configuration {style!r}: configure the raster first (gis-raster/<path>)",
            style=style,
        )
    return path


def style_ids(mapnik_dir: Path) -> list[str]:
    """The ids of the configured styles (the raster layers), sorted: every ``<id>.xml`` whose
    name is a style id."""
    if not mapnik_dir.is_dir():
        return []
    names = (path.stem for path in mapnik_dir.glob("*.xml") if path.is_file())
    return sorted(name for name in names if _STYLE_ID.fullmatch(name))


def read_style(mapnik_dir: Path, style: str) -> StyleInfo:
    """The bounds and layer CRS of a style, read again only when its file changes.

    Raises:
        InvalidInputError: the name is not a style id.
        NotFoundError: no such style.
        UnprocessableError: the XML cannot be parsed.
    """
    path = style_path(mapnik_dir, style)
    mtime = os.stat(path).st_mtime_ns
    known = _cache.get(style)
    if known is not None and known.mtime_ns == mtime and known.path == path:
        return known
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise UnprocessableError(
            f"the map configuration {style!r} is not valid XML: {exc}"
        ) from exc
    params = {p.get("name"): (p.text or "") for p in root.findall("Parameters/Parameter")}
    bounds = [float(v) for v in params["bounds"].split(",")] if params.get("bounds") else None
    layer = root.find("Layer")
    zoom = int(params["zoom"]) if params.get("zoom") else None
    srs = layer.get("srs") if layer is not None else None
    rendering = json.loads(params["rendering"]) if params.get("rendering") else None
    statistics = json.loads(params["statistics"]) if params.get("statistics") else []
    source = root.find("Layer[@name='raster']/Datasource/Parameter[@name='file']")
    raster = (path.parent / source.text).resolve() if source is not None and source.text else None
    tables = tuple(
        table.text or ""
        for source in root.iterfind("Layer/Datasource")
        if source.findtext("Parameter[@name='type']") == "postgis"
        for table in source.iterfind("Parameter[@name='table']")
    )
    info = StyleInfo(style, path, mtime, bounds, zoom, srs, rendering, statistics, raster, tables)
    _cache[style] = info
    return info


def styles_drawing(mapnik_dir: Path, schema: str, table: str) -> list[str]:
    """The styles one of whose PostGIS datasources reads ``schema.table`` (those that cannot be
    read are left out)."""
    found = []
    for style in style_ids(mapnik_dir):
        try:
            if read_style(mapnik_dir, style).draws(schema, table):
                found.append(style)
        except (NotFoundError, UnprocessableError):  # removed meanwhile, or not XML
            continue
    return found
