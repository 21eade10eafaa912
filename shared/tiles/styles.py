"""Map styles: the Mapnik XML files of ``<workDir>/map/mapnik``, and what tiles need of them."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

from shared.errors import InvalidInputError, NotFoundError, UnprocessableError

__all__ = ["LANG_TOKEN", "StyleInfo", "check_lang", "read_style", "style_path"]

#: Written in a style's XML where the label language goes (``[name_{{lang}}]``); each
#: rendering replaces it with the requested language.
LANG_TOKEN = "{{lang}}"
_STYLE_ID = re.compile(r"^[A-Za-z0-9_-]{1,512}$")
_LANG = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$")


@dataclass(frozen=True)
class StyleInfo:
    """What the tile server reads from a style without Mapnik."""

    style: str
    path: Path
    mtime_ns: int
    bounds: list[float] | None
    zoom: int | None
    layer_srs: str | None


_cache: dict[str, StyleInfo] = {}


def style_path(mapnik_dir: Path, style: str) -> Path:
    """The XML file of ``style``.

    Raises:
        InvalidInputError: the name is not a style id.
        NotFoundError: no such style.
    """
    if not _STYLE_ID.match(style):
        raise InvalidInputError("a style is a layer id (URL-safe base64)", style=style[:64])
    path = mapnik_dir / f"{style}.xml"
    if not path.is_file():
        raise NotFoundError(
            f"no map configuration {style!r}: configure the raster first (gis-raster/<path>)",
            style=style,
        )
    return path


def check_lang(lang: str) -> str:
    """Refuse what is not a language tag (``en``, ``uk``, ``pt-BR``)."""
    if not _LANG.match(lang):
        raise InvalidInputError("lang must be a language tag such as en or pt-BR", lang=lang[:32])
    return lang


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
    info = StyleInfo(style, path, mtime, bounds, zoom, srs)
    _cache[style] = info
    return info
