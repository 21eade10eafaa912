"""Drawing a raster with numpy: any data type and band count, TiTiler's rendering parameters.

A render reads the area from the layer's source as GDAL's warp of it would (the area's own grid,
so a tile samples the source where ``gdalwarp`` of the same tile does, and two neighbours meet
without a jump), from the overview GDAL would pick (the coarsest at least as fine as the area's
pixels). Then, by the :class:`~shared.raster.rendering.Rendering`:

1. the bands (``bidx``, else the layer's defaults) or an expression's blocks (numexpr; a value
   that is not finite, a division by zero say, is nodata);
2. an algorithm over the one band (hillshade, slope, terrain-RGB, Terrarium);
3. each band stretched from ``rescale`` (or its default: its 2–98 % statistics for a source
   band that is not 8-bit, 0–90 for a slope) to 0–255, or coloured by a colour map;
4. one band as gray, three as RGB; transparent where any band has no data (nodata, NaN, masks,
   alpha, outside the raster).

A :class:`RasterDrawer` keeps each process's datasets open (reopened when their file changes).
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numexpr
import numpy as np
import rasterio
from affine import Affine
from rasterio.enums import ColorInterp
from rasterio.errors import NotGeoreferencedWarning
from rasterio.io import DatasetReader
from rasterio.warp import reproject, transform_bounds
from rio_tiler.colormap import cmap

from shared.errors import UnprocessableError
from shared.raster import algorithms
from shared.raster.gdal import GDAL_ERRORS, gdal_message
from shared.raster.rendering import Rendering
from shared.raster.resampling import DEFAULT_RESAMPLING
from shared.raster.statistics import stretch_of
from shared.tiles.grid import RenderArea

__all__ = ["LayerDrawing", "RasterDrawer"]

_WEB_MERCATOR = "EPSG:3857"
_EARTH_RADIUS = 6378137.0
#: open datasets kept by a process (a layer's source, and each overview level read)
_OPEN_DATASETS = 64
#: the stretch of a slope in degrees, when none is given
_SLOPE_RANGE = (0.0, 90.0)


@dataclass(frozen=True)
class LayerDrawing:
    """What a layer's configuration says of its drawing: its source (with overviews), its own
    rendering (None: Mapnik draws it), and the statistics of its bands."""

    source: Path
    rendering: Rendering | None
    statistics: list[dict[str, Any]]


class RasterDrawer:
    """Draws areas of raster layers as RGBA pixels; keeps the datasets it read open."""

    def __init__(self) -> None:
        self._open: OrderedDict[tuple[Path, int], tuple[int, DatasetReader]] = OrderedDict()

    def close(self) -> None:
        """Close every dataset."""
        for _, ds in self._open.values():
            ds.close()
        self._open.clear()

    def _dataset(self, path: Path, level: int = -1) -> DatasetReader:
        """``path`` open (``level`` ≥ 0: its overview of that index), kept open."""
        mtime = os.stat(path).st_mtime_ns
        kept = self._open.get((path, level))
        if kept is not None and kept[0] == mtime:
            self._open.move_to_end((path, level))
            return kept[1]
        if kept is not None:
            kept[1].close()
        options = {"overview_level": level} if level >= 0 else {}
        ds = rasterio.open(path, **options)
        self._open[(path, level)] = (mtime, ds)
        while len(self._open) > _OPEN_DATASETS:
            _, (_, oldest) = self._open.popitem(last=False)
            oldest.close()
        return ds

    def band_count(self, layer: LayerDrawing) -> int:
        """How many bands the layer's source has."""
        return int(self._dataset(layer.source).count)

    def draw(self, layer: LayerDrawing, area: RenderArea, rendering: Rendering) -> np.ndarray:
        """The RGBA pixels (rows, columns, 4 bytes; not premultiplied) of ``area`` of ``layer``
        drawn with ``rendering``: nothing chosen, the layer's own; else the choices of
        ``rendering``, the layer's where it chose nothing (:meth:`Rendering.with_defaults`).

        Raises:
            UnprocessableError: the source cannot be read.
        """
        if layer.rendering is not None:
            own = layer.rendering
            rendering = own if rendering.empty else rendering.with_defaults(own)
        try:
            ds = self._dataset(layer.source)
            bands = _bands_read(rendering, ds)
            buffer = algorithms.buffered(rendering)
            data, alpha = self._read(ds, layer.source, bands, area, rendering, buffer)
        except GDAL_ERRORS as exc:
            raise UnprocessableError(
                f"{layer.source.name}: {gdal_message(exc)}", file=layer.source.name
            ) from exc
        dtypes = [ds.dtypes[b - 1] for b in bands]
        return _colour(data, alpha, rendering, bands, dtypes, layer.statistics, area, buffer)

    def _read(
        self,
        ds: DatasetReader,
        path: Path,
        bands: Sequence[int],
        area: RenderArea,
        rendering: Rendering,
        buffer: int,
    ) -> tuple[np.ma.MaskedArray, np.ndarray | None]:
        """The bands of ``area`` (``buffer`` pixels past each side too) as float32, masked where
        there is no data, and the source's alpha band warped alike (None when it has none)."""
        crs = area.srs or _WEB_MERCATOR
        minx, miny, maxx, maxy = area.bbox
        resx, resy = (maxx - minx) / area.width, (maxy - miny) / area.height
        width, height = area.width + 2 * buffer, area.height + 2 * buffer
        transform = Affine(resx, 0, minx - buffer * resx, 0, -resy, maxy + buffer * resy)
        source = self._level(ds, path, area, crs)
        interp = list(ds.colorinterp)
        alpha_band = interp.index(ColorInterp.alpha) + 1 if ColorInterp.alpha in interp else None
        nodata = rendering.nodata if rendering.nodata is not None else ds.nodata
        resampling = (rendering.resampling or DEFAULT_RESAMPLING).gdal
        read = [*bands, alpha_band] if alpha_band and nodata is None else list(bands)
        out = np.full((len(read), height, width), np.nan, np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotGeoreferencedWarning)
            reproject(
                source=rasterio.band(source, read),
                destination=out,
                src_nodata=nodata,
                dst_transform=transform,
                dst_crs=crs,
                dst_nodata=np.nan,
                resampling=resampling,
            )
        alpha = out[-1] if len(read) > len(bands) else None
        data = out[: len(bands)]
        return np.ma.masked_invalid(data, copy=False), alpha

    def _level(self, ds: DatasetReader, path: Path, area: RenderArea, crs: str) -> DatasetReader:
        """The dataset GDAL's warp would read for ``area``: the coarsest overview at least as
        fine as the area's pixels, else ``ds`` itself."""
        factors = ds.overviews(1)
        if not factors:
            return ds
        try:
            left, bottom, right, top = transform_bounds(crs, ds.crs, *area.bbox, densify_pts=5)
        except GDAL_ERRORS:
            return ds
        ratio = min(
            (right - left) / ds.res[0] / area.width, (top - bottom) / ds.res[1] / area.height
        )
        level = -1
        for index, factor in enumerate(factors):
            if factor <= ratio * (1 + 1e-6):
                level = index
        return ds if level < 0 else self._dataset(path, level)


def _bands_read(rendering: Rendering, ds: DatasetReader) -> tuple[int, ...]:
    """The source bands ``rendering`` reads: its own, else the first (an algorithm's, or a
    raster of one band), else the first three."""
    if rendering.bands_read:
        return rendering.bands_read
    interp = list(ds.colorinterp)
    data_bands = [i + 1 for i, c in enumerate(interp) if c is not ColorInterp.alpha] or [1]
    if rendering.algorithm or len(data_bands) < 3:
        return (data_bands[0],)
    return tuple(data_bands[:3])


def _evaluate(rendering: Rendering, bands: Sequence[int], data: np.ma.MaskedArray) -> np.ndarray:
    """The blocks of the rendering's expression over ``data`` (NaN where a band has none)."""
    values = {f"b{band}": data.filled(np.nan)[i] for i, band in enumerate(bands)}
    blocks = (rendering.expression or "").split(";")
    with np.errstate(all="ignore"):
        out = [numexpr.evaluate(block, local_dict=values) for block in blocks]
    result = np.stack([np.broadcast_to(np.asarray(b, np.float32), data.shape[1:]) for b in out])
    return np.where(np.isfinite(result), result, np.nan).astype(np.float32)


def _ground_res(area: RenderArea, rows: int, buffer: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ground pixel size (metres; a column vector) of a Web Mercator area."""
    minx, miny, maxx, maxy = area.bbox
    resx, resy = (maxx - minx) / area.width, (maxy - miny) / area.height
    if (area.srs or _WEB_MERCATOR).upper() != _WEB_MERCATOR:
        return np.full((rows, 1), resx), np.full((rows, 1), resy)
    y = maxy + buffer * resy - (np.arange(rows) + 0.5) * resy
    cos_lat = np.cos(np.arctan(np.sinh(y / _EARTH_RADIUS)))[:, np.newaxis]
    return resx * cos_lat, resy * cos_lat


def _algorithm(rendering: Rendering, band: np.ndarray, area: RenderArea, buffer: int) -> np.ndarray:
    """The algorithm's output over ``band`` (NaN where no data), less the buffer."""
    name = rendering.algorithm
    inner = band[buffer : band.shape[0] - buffer, buffer : band.shape[1] - buffer]
    if name == "terrainrgb":
        values = algorithms.terrain_rgb(
            np.nan_to_num(inner),
            interval=rendering.algorithm_value("interval"),
            baseval=rendering.algorithm_value("baseval"),
        )
        return values.astype(np.float32)
    if name == "terrarium":
        return algorithms.terrarium(np.nan_to_num(inner)).astype(np.float32)
    xres, yres = _ground_res(area, band.shape[0], buffer)
    xres, yres = xres[1:-1], yres[1:-1]
    z_factor = rendering.algorithm_value("z_factor")
    if name == "slope":
        out = algorithms.slope_degrees(band, xres, yres, z_factor)
    else:
        out = algorithms.hillshade(
            band,
            xres,
            yres,
            azimuth=rendering.algorithm_value("azimuth"),
            altitude=rendering.algorithm_value("angle_altitude"),
            z_factor=z_factor,
        )
    return out[np.newaxis]


def _stretch(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``values`` from ``lo``..``hi`` to 0..255 (clipped)."""
    with np.errstate(all="ignore"):
        return np.clip((values - lo) * (255.0 / (hi - lo)), 0, 255)


def _ranges(
    rendering: Rendering,
    bands: Sequence[int],
    dtypes: Sequence[str],
    statistics: list[dict[str, Any]],
    count: int,
) -> list[tuple[float, float] | None]:
    """The stretch of each of ``count`` bands drawn (None: the values are drawn as they are,
    clipped to 0..255)."""
    if rendering.rescale:
        last = len(rendering.rescale) - 1
        return [rendering.rescale[min(i, last)] for i in range(count)]
    if rendering.algorithm == "slope":
        return [_SLOPE_RANGE] * count
    if rendering.expression or rendering.algorithm:
        return [None] * count
    return [
        None if dtype == "uint8" else stretch_of(statistics, band)
        for band, dtype in zip(bands, dtypes, strict=True)
    ]


def _lookup(values: np.ndarray, rendering: Rendering) -> np.ndarray:
    """The RGBA of each value (rows, columns, 4) by the rendering's colour map (transparent where
    no colour is given)."""
    rgba = np.zeros((*values.shape, 4), np.uint8)
    if rendering.colormap_name:
        table = np.array([cmap.get(rendering.colormap_name)[i] for i in range(256)], np.uint8)
        index = np.clip(np.nan_to_num(values), 0, 255).astype(np.uint8)
        looked_up: np.ndarray = table[index]
        return looked_up
    if rendering.intervals:
        lows = np.array([lo for (lo, _), _ in rendering.colormap])
        highs = np.array([hi for (_, hi), _ in rendering.colormap])
        colours = np.array([c for _, c in rendering.colormap], np.uint8)
        slot = np.clip(np.searchsorted(lows, values, side="right") - 1, 0, len(lows) - 1)
        inside = (values >= lows[slot]) & (values < highs[slot])
        rgba[inside] = colours[slot[inside]]
        return rgba
    keys = np.array([k for k, _ in rendering.colormap])
    colours = np.array([c for _, c in rendering.colormap], np.uint8)
    slot = np.clip(np.searchsorted(keys, values), 0, len(keys) - 1)
    exact = keys[slot] == values
    rgba[exact] = colours[slot[exact]]
    return rgba


def _colour(
    data: np.ma.MaskedArray,
    alpha: np.ndarray | None,
    rendering: Rendering,
    bands: Sequence[int],
    dtypes: Sequence[str],
    statistics: list[dict[str, Any]],
    area: RenderArea,
    buffer: int,
) -> np.ndarray:
    """The RGBA pixels of ``data`` (the bands read, ``buffer`` pixels past each side)."""
    values = data.filled(np.nan)
    if rendering.expression:
        values = _evaluate(rendering, bands, data)
    if rendering.algorithm:
        inner = values[0, buffer : values.shape[1] - buffer, buffer : values.shape[2] - buffer]
        has_data = np.isfinite(inner)  # an encoding (terrain-RGB) is finite everywhere
        values = _algorithm(rendering, values[0], area, buffer)
        values[:, ~has_data] = np.nan
        if alpha is not None:
            alpha = alpha[buffer : alpha.shape[0] - buffer, buffer : alpha.shape[1] - buffer]
    valid = np.isfinite(values).all(axis=0)
    if rendering.algorithm in ("terrainrgb", "terrarium"):
        rgb = np.nan_to_num(values).astype(np.uint8)
    elif rendering.colormap_name or rendering.colormap:
        single = values[0]
        if rendering.colormap_name or rendering.rescale:
            lo_hi = _ranges(rendering, bands[:1], dtypes[:1], statistics, 1)[0]
            single = _stretch(single, *lo_hi) if lo_hi else single
        rgba = _lookup(np.where(valid, single, 0), rendering)
        rgba[..., 3] = np.where(valid, rgba[..., 3], 0)
        return _with_alpha(rgba, alpha)
    else:
        ranges = _ranges(rendering, bands, dtypes, statistics, len(values))
        stretched = [
            _stretch(v, *r) if r else np.clip(v, 0, 255)
            for v, r in zip(values, ranges, strict=True)
        ]
        rgb = np.nan_to_num(np.stack(stretched[:3] if len(stretched) >= 3 else stretched[:1] * 3))
        rgb = np.round(rgb).astype(np.uint8) if rgb.dtype != np.uint8 else rgb
    rgba = np.empty((*valid.shape, 4), np.uint8)
    rgba[..., :3] = np.moveaxis(rgb, 0, -1)
    rgba[..., 3] = valid * np.uint8(255)
    rgba[~valid, :3] = 0
    return _with_alpha(rgba, alpha)


def _with_alpha(rgba: np.ndarray, alpha: np.ndarray | None) -> np.ndarray:
    """``rgba`` with its alpha times the source's alpha band (when it has one)."""
    if alpha is not None:
        scaled = rgba[..., 3] * (np.nan_to_num(alpha).clip(0, 255) / 255.0)
        rgba[..., 3] = np.round(scaled).astype(np.uint8)
        rgba[rgba[..., 3] == 0, :3] = 0
    return rgba
