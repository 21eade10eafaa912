"""A raster's own statistics, and the drawing they give a raster that is not 8-bit imagery.

The statistics of each band (min, max, mean, standard deviation, median, the 2nd and 98th
percentiles, the share of valid pixels) are computed once, at configuration, from a reduced read
of about :data:`SAMPLE_PX` pixels a side: GDAL reads it from the raster's overviews (a layer
without overviews of its own has them built first), so a 50,000² raster costs what a 1,024² one
does. A raster with no overviews read whole would be bounded by its size alone: it is sampled at
:data:`_WINDOWS` windows instead. Nodata, NaN, masks and alpha are left out.

:func:`default_rendering` is what a raster is drawn with when its user chose nothing (QGIS's
default for a raster that is not 8-bit: a 2–98 % cumulative cut of each band):

- 8-bit RGB or RGBA imagery, and one 8-bit band without a colour table: ``None``, Mapnik draws
  it as it always has;
- a band with a colour table: its colours (the layer's resampling is then ``nearest`` unless
  its user chose another: a tile shows only its colours);
- anything else: the bands the colour interpretation names red, green and blue, else the first
  three, else the first as gray, each stretched from its 2nd to its 98th percentile (8-bit
  bands are not stretched).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rasterio.enums import ColorInterp, Resampling
from rasterio.io import DatasetReader
from rasterio.windows import Window

from shared.raster.rendering import MAX_COLORMAP_ENTRIES, Colour, Rendering

__all__ = ["SAMPLE_PX", "band_statistics", "default_rendering", "stretch_of"]

#: The side of the reduced read the statistics are computed from.
SAMPLE_PX = 1024
#: A raster without overviews is sampled at this many windows a side, of ``_WINDOW_PX`` pixels.
_WINDOWS = 8
_WINDOW_PX = 128
_RGB = (ColorInterp.red, ColorInterp.green, ColorInterp.blue)


def _sample(ds: DatasetReader) -> np.ma.MaskedArray:
    """About ``SAMPLE_PX``² pixels of every band of ``ds``, masked where there is no data."""
    longest = max(ds.width, ds.height)
    if ds.overviews(1) or longest <= 2 * SAMPLE_PX:
        factor = max(1.0, longest / SAMPLE_PX)
        shape = (ds.count, max(1, round(ds.height / factor)), max(1, round(ds.width / factor)))
        data = ds.read(out_shape=shape, masked=True, resampling=Resampling.nearest)
    else:
        parts = []
        for row in range(_WINDOWS):
            for col in range(_WINDOWS):
                top = (ds.height - _WINDOW_PX) * row // (_WINDOWS - 1)
                left = (ds.width - _WINDOW_PX) * col // (_WINDOWS - 1)
                window = Window(left, top, _WINDOW_PX, _WINDOW_PX)
                parts.append(ds.read(window=window, masked=True))
        data = np.ma.concatenate(parts, axis=2)  # type: ignore[no-untyped-call]
    values = np.ma.masked_invalid(data.astype("float64"), copy=False)
    return np.ma.MaskedArray(values.data, np.ma.getmaskarray(values) | np.ma.getmaskarray(data))


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def band_statistics(ds: DatasetReader) -> list[dict[str, Any]]:
    """The statistics of each band of ``ds``, in band order; a band with no valid pixel has
    ``None`` for each value."""
    data = _sample(ds)
    stats = []
    for index in range(ds.count):
        band = data[index]
        valid = band.compressed()
        entry: dict[str, Any] = {"band": index + 1, "dtype": ds.dtypes[index]}
        if valid.size == 0:
            names = ("min", "max", "mean", "std", "median", "percentile_2", "percentile_98")
            entry |= dict.fromkeys(names)
        else:
            p2, median, p98 = np.percentile(valid, [2, 50, 98])
            entry |= {
                "min": _round(valid.min()),
                "max": _round(valid.max()),
                "mean": _round(valid.mean()),
                "std": _round(valid.std()),
                "median": _round(median),
                "percentile_2": _round(p2),
                "percentile_98": _round(p98),
            }
        entry["valid_percent"] = round(100 * valid.size / max(1, band.size), 2)
        stats.append(entry)
    return stats


def _bands(ds: DatasetReader) -> tuple[int, ...]:
    """The bands shown by default: red, green and blue by colour interpretation, else the first
    three (of three or more), else the first."""
    interp = list(ds.colorinterp)
    if all(c in interp for c in _RGB):
        return tuple(interp.index(c) + 1 for c in _RGB)
    data_bands = [i + 1 for i, c in enumerate(interp) if c is not ColorInterp.alpha]
    return tuple(data_bands[:3]) if len(data_bands) >= 3 else tuple((data_bands or [1])[:1])


def _is_imagery(ds: DatasetReader) -> bool:
    """8-bit RGB(A) imagery or one 8-bit band without colours: what Mapnik has always drawn."""
    if any(dtype != "uint8" for dtype in ds.dtypes) or _colour_table(ds):
        return False
    interp = list(ds.colorinterp)
    if ds.count == 1:
        return True
    rgb = interp[:3] == list(_RGB)
    return (ds.count == 3 and rgb) or (ds.count == 4 and rgb and interp[3] is ColorInterp.alpha)


def _colour_table(ds: DatasetReader) -> dict[int, tuple[int, int, int, int]]:
    if ds.colorinterp[0] is not ColorInterp.palette:
        return {}
    try:
        return dict(ds.colormap(1))
    except ValueError:  # GDAL says palette, but has no table
        return {}


def _rgba(colour: tuple[int, ...]) -> Colour:
    r, g, b, *a = colour
    return (r, g, b, a[0] if a else 255)


def default_rendering(ds: DatasetReader, stats: list[dict[str, Any]]) -> Rendering | None:
    """How ``ds`` is drawn when its user chose nothing (see the module's words); None: as
    Mapnik draws it."""
    if _is_imagery(ds):
        return None
    table = _colour_table(ds)
    if table:
        # GDAL pads a table to 256 entries: those past the band's largest value go
        top = stats[0]["max"] if stats[0]["max"] is not None else max(table)
        colours = tuple(sorted((float(k), _rgba(v)) for k, v in table.items() if k <= top))
        if len(colours) <= MAX_COLORMAP_ENTRIES:  # a larger table (16-bit) is stretched
            return Rendering(bidx=(1,), colormap=colours)
    bands = _bands(ds)
    rescale = []
    for band in bands:
        entry = stats[band - 1]
        lo, hi = entry["percentile_2"], entry["percentile_98"]
        if ds.dtypes[band - 1] == "uint8":
            lo, hi = 0.0, 255.0
        elif lo is None or hi is None:
            lo, hi = 0.0, 1.0
        elif not lo < hi:  # a band of one value: shown mid-gray
            lo, hi = lo - 1.0, hi + 1.0
        rescale.append((lo, hi))
    return Rendering(bidx=bands, rescale=tuple(rescale))


def stretch_of(stats: list[dict[str, Any]], band: int) -> tuple[float, float] | None:
    """The default stretch of ``band`` (its 2nd to 98th percentile), when known."""
    if not 1 <= band <= len(stats):
        return None
    lo, hi = stats[band - 1].get("percentile_2"), stats[band - 1].get("percentile_98")
    if lo is None or hi is None:
        return None
    return (lo, hi) if lo < hi else (lo - 1.0, hi + 1.0)
