"""A raster layer's legend: the colours of its rendering as JSON, and as a small PNG.

The legend follows the drawing (:func:`~shared.raster.rendering.effective_rendering`): a named
colour map or one band in gray is a ``gradient`` from the stretch's min to its max (eleven
stops in the JSON, 256 colours in the PNG); a colour map of values is ``classes``, of intervals
``intervals`` (a swatch each); three bands are ``rgb`` and an algorithm's output (hillshade,
terrain-RGB) ``gray``/``rgb`` with no values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rio_tiler.colormap import cmap

from shared.base.png import png_avg
from shared.raster.rendering import Colour, Rendering
from shared.raster.statistics import stretch_of

__all__ = ["legend", "legend_png"]

_STOPS = 11
_BAR = (256, 16)  # width, height of a gradient's PNG
_SWATCH = 16
#: the most swatches a PNG of classes shows in a row
_ROW = 16


def _hex(colour: Colour | tuple[int, ...]) -> str:
    return "#" + "".join(f"{c:02x}" for c in colour)


def _stretch(rendering: Rendering, statistics: list[dict[str, Any]]) -> tuple[float, float] | None:
    if rendering.rescale:
        return rendering.rescale[0]
    if rendering.expression:
        return None
    band = rendering.bidx[0] if rendering.bidx else 1
    dtype = statistics[band - 1]["dtype"] if 0 < band <= len(statistics) else None
    return (0.0, 255.0) if dtype == "uint8" else stretch_of(statistics, band)


def _ramp(rendering: Rendering) -> np.ndarray:
    """The 256 RGBA colours of a gradient: the named colour map's, else gray."""
    if rendering.colormap_name:
        table = cmap.get(rendering.colormap_name)
        return np.array([table[i] for i in range(256)], np.uint8)
    gray = np.arange(256, dtype=np.uint8)
    return np.stack([gray, gray, gray, np.full(256, 255, np.uint8)], axis=1)


def legend(rendering: Rendering, statistics: list[dict[str, Any]]) -> dict[str, Any]:
    """The legend of a layer drawn with ``rendering`` (its effective one).

    Returns:
        ``rendering`` (as JSON), ``kind`` (``gradient``, ``classes``, ``intervals``, ``rgb``,
        ``gray``), ``min``/``max`` of a gradient (null when not known), and ``entries``: each
        ``{"value", "color"}`` (``value`` a number, or ``[min, max]`` of an interval; ``color``
        ``#rrggbbaa``).
    """
    out: dict[str, Any] = {"rendering": rendering.to_json(), "min": None, "max": None}
    if rendering.colormap:
        out["kind"] = "intervals" if rendering.intervals else "classes"
        out["entries"] = [
            {"value": list(value) if isinstance(value, tuple) else value, "color": _hex(c)}
            for value, c in rendering.colormap
        ]
        return out
    if rendering.expression:
        three = len(rendering.expression.split(";")) >= 3
    else:  # no bands chosen: the first three of three or more, as the drawing reads them
        three = len(rendering.bidx) >= 3 or (not rendering.bidx and len(statistics) >= 3)
    if rendering.algorithm in ("terrainrgb", "terrarium") or (three and not rendering.algorithm):
        return out | {"kind": "rgb", "entries": []}
    if rendering.algorithm == "hillshade":
        return out | {"kind": "gray", "entries": []}
    stretch = _ramp_range(rendering, statistics)
    ramp = _ramp(rendering)
    entries = []
    for i in range(_STOPS):
        index = round(i * 255 / (_STOPS - 1))
        value = None if stretch is None else stretch[0] + (stretch[1] - stretch[0]) * i / 10
        entries.append({"value": value, "color": _hex(tuple(int(c) for c in ramp[index]))})
    low, high = stretch if stretch is not None else (None, None)
    return out | {"kind": "gradient", "min": low, "max": high, "entries": entries}


def _ramp_range(
    rendering: Rendering, statistics: list[dict[str, Any]]
) -> tuple[float, float] | None:
    if rendering.algorithm == "slope" and not rendering.rescale:
        return (0.0, 90.0)
    return _stretch(rendering, statistics)


def legend_png(rendering: Rendering, statistics: list[dict[str, Any]]) -> bytes:
    """The legend as a PNG: a bar of the gradient (256 x 16), or a swatch (16 x 16) of each
    class in rows of 16; a 16 x 16 transparent image when it has no colours to show."""
    drawn = legend(rendering, statistics)
    if drawn["kind"] == "gradient":
        width, height = _BAR
        pixels = np.broadcast_to(_ramp(rendering)[np.newaxis], (height, width, 4))
        return png_avg(np.ascontiguousarray(pixels))
    colours = [bytes.fromhex(e["color"][1:]) for e in drawn["entries"]]
    if not colours:
        return png_avg(np.zeros((_SWATCH, _SWATCH, 4), np.uint8))
    rows = -(-len(colours) // _ROW)
    columns = min(len(colours), _ROW)
    pixels = np.zeros((rows * _SWATCH, columns * _SWATCH, 4), np.uint8)
    for i, colour in enumerate(colours):
        row, column = divmod(i, _ROW)
        box = pixels[row * _SWATCH : (row + 1) * _SWATCH, column * _SWATCH : (column + 1) * _SWATCH]
        box[1:-1, 1:-1] = np.frombuffer(colour, np.uint8)
    return png_avg(pixels)
