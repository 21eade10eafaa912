"""Drawing a raster with numpy: any data type and band count, TiTiler's rendering parameters.

A render reads the area from the layer's source as GDAL's warp of it would (the area's own grid,
so a tile samples the source where ``gdalwarp`` of the same tile does, and two neighbours meet
without a jump), from the overview GDAL would pick (the coarsest at least as fine as the area's
pixels): ``nearest`` between CRSs whose columns and rows map to columns and rows takes GDAL's
very pixels; otherwise the tile's pixel centres are placed in the source through a grid of
transformed points (GDAL's approximating transformer's way) and OpenCV's ``remap`` picks or
blends the source's pixels there, with GDAL's rules for nodata and alpha (8-bit bands drawn as
they are in bytes, the rest in float32); ``cubic``, rotated pixels and other masks go through
GDAL's warp itself. Then, by the :class:`~shared.raster.rendering.Rendering`:

1. the bands (``bidx``, else the layer's defaults) or an expression's blocks (numexpr; a value
   that is not finite, a division by zero say, is nodata);
2. an algorithm over the one band (hillshade, slope, terrain-RGB, Terrarium);
3. each band stretched from ``rescale`` (or its default: its 2–98 % statistics for a source
   band that is not 8-bit, 0–90 for a slope) to 0–255, or coloured by a colour map;
4. one band as gray, three as RGB; transparent where there is no data: a pixel whose every band
   read is nodata (GDAL's warp's rule; a band that alone is nodata is drawn as 0), NaN or an
   expression's non-finite value, masks, alpha, outside the raster.

A :class:`RasterDrawer` keeps each process's datasets open (reopened when their file changes).
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import cv2
import numexpr
import numpy as np
import rasterio
from affine import Affine
from pyproj import Transformer
from pyproj.exceptions import CRSError, ProjError
from rasterio.crs import CRS
from rasterio.enums import ColorInterp, MaskFlags, Resampling
from rasterio.errors import NotGeoreferencedWarning
from rasterio.io import DatasetReader
from rasterio.warp import reproject, transform_bounds
from rasterio.windows import Window
from rio_tiler.colormap import cmap

from shared.base.grid import RenderArea
from shared.errors import InvalidInputError, UnprocessableError
from shared.raster import algorithms
from shared.raster.gdal import GDAL_ERRORS, gdal_message
from shared.raster.rendering import Rendering, effective_rendering
from shared.raster.resampling import DEFAULT_RESAMPLING, LayerResampling
from shared.raster.statistics import stretch_of

__all__ = ["LayerDrawing", "RasterDrawer"]

# one thread: a render process is one of as many as the machine has cores
cv2.setNumThreads(1)

_WEB_MERCATOR = "EPSG:3857"
_EARTH_RADIUS = 6378137.0
#: open datasets kept by a process (a layer's source, and each overview level read)
_OPEN_DATASETS = 64
#: the stretch of a slope in degrees, when none is given
_SLOPE_RANGE = (0.0, 90.0)
#: the CRSs (EPSG codes) between which a warp maps each column to a column and each row to a
#: row: a longitude is a function of x alone, a latitude of y alone
_SEPARABLE = frozenset({3857, 4326})
#: the data types a nearest read takes itself (as float32, the value GDAL's warp gives)
_NEAREST_TYPES = frozenset({"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32"})
#: the most source pixels a nearest read takes per pixel drawn (past it, GDAL's warp reads)
_NEAREST_SPAN = 16
#: how far (source pixels) a destination pixel's centre may lie short of a source pixel's edge
#: and still fall in it: GDAL's warp kernel's tolerance
_EDGE_EPSILON = 1e-10
_FLOAT32_EPSILON = np.finfo(np.float32).eps
#: a read maps the destination's pixels to the source's through a grid of points this many
#: pixels apart, interpolated between (GDAL's warp, through its approximating transformer)
_SPACING = 32
#: the largest error (source pixels) of the grid's interpolation a bilinear read takes
_GRID_ERROR = 0.05
#: the least weight of valid source pixels a bilinear value is made of (GDAL's warp's)
_LEAST_WEIGHT = 1e-5


@dataclass(frozen=True)
class LayerDrawing:
    """What a layer's configuration says of its drawing: its source (with overviews), its own
    rendering (None: none chosen, its values as they are), the statistics of its bands, and
    its resampling (what a rendering that names none draws with)."""

    source: Path
    rendering: Rendering | None
    statistics: list[dict[str, Any]]
    resampling: LayerResampling = DEFAULT_RESAMPLING


class RasterDrawer:
    """Draws areas of raster layers as RGBA pixels; keeps the datasets it read open."""

    def __init__(self) -> None:
        self._open: OrderedDict[tuple[Path, int], tuple[int, DatasetReader]] = OrderedDict()
        #: what the reads need of each open dataset (by its id), read once
        self._grids: dict[int, _SourceGrid] = {}

    def close(self) -> None:
        """Close every dataset."""
        for _, ds in self._open.values():
            ds.close()
        self._open.clear()
        self._grids.clear()

    def _grid(self, ds: DatasetReader) -> _SourceGrid:
        """What the reads need of ``ds`` (an open dataset of this drawer's)."""
        grid = self._grids.get(id(ds))
        if grid is None:
            grid = self._grids[id(ds)] = _SourceGrid.of(ds)
        return grid

    def _dataset(self, path: Path, level: int = -1) -> DatasetReader:
        """``path`` open (``level`` ≥ 0: its overview of that index), kept open."""
        mtime = os.stat(path).st_mtime_ns
        kept = self._open.get((path, level))
        if kept is not None and kept[0] == mtime:
            self._open.move_to_end((path, level))
            return kept[1]
        if kept is not None:
            self._grids.pop(id(kept[1]), None)
            kept[1].close()
        options = {"overview_level": level} if level >= 0 else {}
        ds = rasterio.open(path, **options)
        self._open[(path, level)] = (mtime, ds)
        while len(self._open) > _OPEN_DATASETS:
            _, (_, oldest) = self._open.popitem(last=False)
            self._grids.pop(id(oldest), None)
            oldest.close()
        return ds

    def band_count(self, layer: LayerDrawing) -> int:
        """How many bands the layer's source has."""
        return int(self._dataset(layer.source).count)

    def draw(self, layer: LayerDrawing, area: RenderArea, rendering: Rendering) -> np.ndarray:
        """The RGBA pixels (rows, columns, 4 bytes; not premultiplied) of ``area`` of ``layer``
        drawn with ``rendering`` over the layer's own
        (:func:`~shared.raster.rendering.effective_rendering`).

        Raises:
            UnprocessableError: the source cannot be read.
        """
        rendering = effective_rendering(rendering, layer.rendering)
        try:
            ds = self._dataset(layer.source)
            bands = _bands_read(rendering, ds)
            buffer = algorithms.buffered(rendering)
            resampling = (rendering.resampling or layer.resampling).gdal
            if _as_they_are(rendering, ds, bands, resampling):
                pixels = self._drawn_bytes(ds, layer.source, bands, area, resampling)
                if pixels is not None:
                    return pixels
            data, alpha = self._read(ds, layer.source, bands, area, rendering, resampling, buffer)
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
        resampling: Resampling,
        buffer: int,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The bands of ``area`` (``buffer`` pixels past each side too) as float32, NaN where
        there is no data, and the source's alpha band warped alike (None when it has none).

        GDAL's warp draws them; but a ``nearest`` warp whose columns and rows map to columns and
        rows of the source (the same CRS, or Web Mercator and degrees) is done here, to the
        same values: read the source's window, take the pixel under each destination pixel's
        centre (:func:`_nearest`); and a ``bilinear`` one is done here at the same places
        (:func:`_places`, :func:`_at_places`). GDAL's warp of a tile costs several milliseconds
        however few its pixels; these reads, a fraction of it.
        """
        crs, dst_transform, width, height = _destination(area, buffer)
        nodata = rendering.nodata if rendering.nodata is not None else ds.nodata
        if rendering.nodata is not None and not _takes_nodata(np.dtype(ds.dtypes[0]), nodata):
            raise InvalidInputError(
                f"nodata: {nodata:g} is not a value of the layer's data type ({ds.dtypes[0]})",
                parameter="nodata",
            )
        read = _read_bands(ds, bands, nodata)
        out = None
        if resampling in (Resampling.nearest, Resampling.bilinear):
            source, centres, places = self._placed(ds, path, area, dst_transform, width, height)
            if resampling is Resampling.nearest and centres is not None:
                out = _nearest(source, self._grid(source), read, nodata, centres)
            elif places is not None:
                out = _at_places(source, self._grid(source), read, nodata, places, resampling)
        else:
            source = self._level(ds, path, area, crs)
        if out is None:
            out = np.full((len(read), height, width), np.nan, np.float32)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NotGeoreferencedWarning)
                reproject(
                    source=rasterio.band(source, read),
                    destination=out,
                    src_nodata=nodata,
                    dst_transform=dst_transform,
                    dst_crs=crs,
                    dst_nodata=np.nan,
                    resampling=resampling,
                )
        alpha = out[-1] if len(read) > len(bands) else None
        data = out[: len(bands)]
        # no data is NaN; an infinity is no data either
        if np.isinf(data).any():
            data[np.isinf(data)] = np.nan
        return data, alpha

    def _drawn_bytes(
        self,
        ds: DatasetReader,
        path: Path,
        bands: Sequence[int],
        area: RenderArea,
        resampling: Resampling,
    ) -> np.ndarray | None:
        """The RGBA pixels of 8-bit ``bands`` drawn as they are (one as gray), read at the
        places of :meth:`_read`'s and resampled in bytes by OpenCV: what :meth:`_read` and
        :func:`_colour` would draw (to a level, by rounding), at a fraction of the cost. None
        where it cannot (:meth:`_read` draws it)."""
        crs, dst, width, height = _destination(area, 0)
        own = self._grid(ds).crs
        if resampling is Resampling.nearest and own is not None and _axes(own, crs):
            return None  # :func:`_nearest` takes GDAL's very pixels (OpenCV's rounds a tie)
        source, _, places = self._placed(ds, path, area, dst, width, height)
        if places is None:
            return None
        grid = self._grid(source)
        nodata = ds.nodata
        read = _read_bands(ds, bands, nodata)
        if len(read) == len(bands) and not all(grid.plain[band - 1] for band in bands):
            return None
        if nodata is not None and not _takes_nodata(np.dtype(np.uint8), nodata):
            return None
        return _resampled_bytes(source, grid, read, nodata, places, resampling)

    def _placed(
        self, ds: DatasetReader, path: Path, area: RenderArea, dst: Affine, width: int, height: int
    ) -> tuple[DatasetReader, _Centres | None, _Places | None]:
        """The dataset GDAL's warp reads for the ``width`` x ``height`` pixels of ``dst`` (the
        area's grid, :meth:`_level`), and where their centres fall in it: a separable warp's
        centres (:func:`_centres`, else None), and the places (:class:`_Places`; None where the
        source's pixels are rotated or the grid's interpolation is too far off)."""
        crs = area.srs or _WEB_MERCATOR
        own = self._grid(ds)
        centres = _centres(area, crs, dst, width, height, own.crs)
        places = None if centres else _places(own, crs, dst, width, height)
        bounds = centres.bounds if centres else places.bounds(own) if places else None
        source = self._level(ds, path, area, crs, bounds)
        grid = self._grid(source)
        if centres is not None:
            places = _Places.of(grid, centres)
        elif places is not None and source is not ds:  # an overview: its pixels
            places = places.scaled(grid.width / own.width, grid.height / own.height)
        return source, centres, places

    def _level(
        self,
        ds: DatasetReader,
        path: Path,
        area: RenderArea,
        crs: str,
        bounds: tuple[float, float, float, float] | None = None,
    ) -> DatasetReader:
        """The dataset GDAL's warp would read for ``area``: the coarsest overview at least as
        fine as the area's pixels, else ``ds`` itself. ``bounds``: the area's in the source's
        CRS, when known."""
        factors = self._grid(ds).factors
        if not factors:
            return ds
        if bounds is None:
            try:
                bounds = transform_bounds(crs, ds.crs, *area.bbox, densify_pts=5)
            except GDAL_ERRORS:
                return ds
        left, bottom, right, top = bounds
        ratio = min(
            (right - left) / ds.res[0] / area.width, (top - bottom) / ds.res[1] / area.height
        )
        level = -1
        for index, factor in enumerate(factors):
            if factor <= ratio * (1 + 1e-6):
                level = index
        return ds if level < 0 else self._dataset(path, level)


@dataclass(frozen=True)
class _Centres:
    """The centres of the pixels of a warp's destination in its source's CRS, where the warp is
    separable: the x of each column, the y of each row; and the area's bounds there."""

    xs: np.ndarray
    ys: np.ndarray
    bounds: tuple[float, float, float, float]


@dataclass(frozen=True)
class _SourceGrid:
    """What the reads need of a dataset: its geotransform (GDAL's order), size, each
    band's data type, whether each band's mask is its nodata or none (no mask band, no
    alpha), its CRS (WKT; None: none) and its overviews' factors (the first band's)."""

    geo: tuple[float, float, float, float, float, float]
    width: int
    height: int
    dtypes: tuple[str, ...]
    plain: tuple[bool, ...]
    crs: str | None
    factors: tuple[int, ...]

    @classmethod
    def of(cls, ds: DatasetReader) -> _SourceGrid:
        plain = {MaskFlags.all_valid, MaskFlags.nodata}
        return cls(
            geo=tuple(ds.transform.to_gdal()),
            width=int(ds.width),
            height=int(ds.height),
            dtypes=tuple(ds.dtypes),
            plain=tuple(set(flags) <= plain for flags in ds.mask_flag_enums),
            crs=ds.crs.to_wkt() if ds.crs else None,
            factors=tuple(ds.overviews(1)),
        )


@lru_cache(maxsize=64)
def _axes(source: str, crs: str) -> str | None:
    """How a warp from ``source`` (WKT) to ``crs`` maps pixels: ``same`` (one CRS),
    ``separable`` (Web Mercator and degrees: columns to columns, rows to rows), None (any
    other way)."""
    try:
        own, target = CRS.from_wkt(source), CRS.from_user_input(crs)
        if own == target:
            return "same"
        if own.to_epsg() in _SEPARABLE and target.to_epsg() in _SEPARABLE:
            return "separable"
    except (ValueError, *GDAL_ERRORS):  # not a CRS rasterio knows: GDAL's warp tells
        pass
    return None


@lru_cache(maxsize=64)
def _transformer(crs: str, source: str) -> Transformer | None:
    """PROJ's transformation from ``crs`` to ``source`` (WKT), x then y as GDAL's warp has
    them (made once: making one costs more than transforming a tile's points); None where
    PROJ has none."""
    try:
        return Transformer.from_crs(crs, source, always_xy=True)
    except (CRSError, ProjError):
        return None


def _transformed(
    crs: str, source: str, xs: np.ndarray, ys: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """The points ``xs``, ``ys`` of ``crs`` in the ``source`` CRS (WKT); None where one has
    no place there."""
    transformer = _transformer(crs, source)
    if transformer is None:
        return None
    tx, ty = transformer.transform(xs, ys)
    if not (np.isfinite(tx).all() and np.isfinite(ty).all()):
        return None
    return np.asarray(tx, np.float64), np.asarray(ty, np.float64)


def _centres(
    area: RenderArea, crs: str, dst: Affine, width: int, height: int, source: str | None
) -> _Centres | None:
    """The centres of the ``width`` x ``height`` pixels of ``dst`` (in ``crs``) in the
    ``source`` CRS (WKT), transformed as GDAL's warp does (None: the warp is not separable, or a
    point has no place in the source's CRS)."""
    if source is None:
        return None
    axes = _axes(source, crs)
    if axes is None:
        return None
    # GDAL's pixel to map coordinates: x = c + (col + 0.5) * a, y = f + (row + 0.5) * e
    a, _, c, _, e, f = dst[:6]
    xs = (np.arange(width) + 0.5) * a + c
    ys = (np.arange(height) + 0.5) * e + f
    if axes == "same":
        return _Centres(xs, ys, area.bbox)
    minx, miny, maxx, maxy = area.bbox
    # each column's x at one y, each row's y at one x, and the corners (their bounds: x and y
    # each rise with the other CRS's), in one transformation
    across = np.concatenate([xs, np.full(height, xs[width // 2]), [minx, maxx]])
    down = np.concatenate([np.full(width, ys[height // 2]), ys, [miny, maxy]])
    moved = _transformed(crs, source, across, down)
    if moved is None:
        return None
    tx, ty = moved
    bounds = (float(tx[-2]), float(ty[-2]), float(tx[-1]), float(ty[-1]))
    return _Centres(tx[:width], ty[width : width + height], bounds)


def _nearest(
    source: DatasetReader,
    grid: _SourceGrid,
    read: Sequence[int],
    nodata: float | None,
    centres: _Centres,
) -> np.ndarray | None:
    """The ``read`` bands of ``source`` (its ``grid``) at ``centres`` as GDAL's ``nearest``
    warp gives them (float32, NaN where there is no data); None where this read is not GDAL's
    (rotated pixels, masks or alpha, a data type or nodata it does not take): GDAL's warp draws
    it.

    GDAL takes the source pixel a centre falls in, ``floor(column + 1e-10)``, where
    ``0 <= column <= width - 1e-10`` (the last pixel's right edge is in it); a pixel has no data
    where every band read is ``nodata`` (a float band's within ``ARE_REAL_EQUAL``'s
    tolerance): then NaN in every band.
    """
    left, a, b, top, d, e = grid.geo
    if b != 0 or d != 0 or a <= 0 or e >= 0:
        return None
    kinds = {grid.dtypes[band - 1] for band in read}
    if len(kinds) != 1 or not kinds <= _NEAREST_TYPES:
        return None
    if not all(grid.plain[band - 1] for band in read):
        return None
    dtype = np.dtype(kinds.pop())
    if nodata is not None and not _takes_nodata(dtype, nodata):
        return None
    # GDAL's inverse geotransform, then the pixel each centre falls in
    columns = -left / a + centres.xs * (1.0 / a)
    rows = -top / e + centres.ys * (1.0 / e)
    if (np.diff(columns) <= 0).any() or (np.diff(rows) <= 0).any():
        return None  # not in the source's order (a longitude past 180° wrapped)
    inside_x = np.flatnonzero((columns >= 0) & (columns + _EDGE_EPSILON <= grid.width))
    inside_y = np.flatnonzero((rows >= 0) & (rows + _EDGE_EPSILON <= grid.height))
    shape = (len(read), len(centres.ys), len(centres.xs))
    if inside_x.size == 0 or inside_y.size == 0:
        return np.full(shape, np.nan, np.float32)
    ix = np.minimum((columns[inside_x] + _EDGE_EPSILON).astype(np.intp), grid.width - 1)
    iy = np.minimum((rows[inside_y] + _EDGE_EPSILON).astype(np.intp), grid.height - 1)
    col0, row0 = int(ix[0]), int(iy[0])
    cols, lines = int(ix[-1]) - col0 + 1, int(iy[-1]) - row0 + 1
    if cols * lines > _NEAREST_SPAN * shape[1] * shape[2]:
        return None
    data = source.read(list(read), window=Window(col0, row0, cols, lines))
    if lines != iy.size or (iy.size > 1 and not (np.diff(iy) == 1).all()):
        data = data.take(iy - row0, axis=1)
    if cols != ix.size or (ix.size > 1 and not (np.diff(ix) == 1).all()):
        data = data.take(ix - col0, axis=2)
    values: np.ndarray = data.astype(np.float32)
    if nodata is not None:
        values[:, _is_nodata(data, nodata).all(axis=0)] = np.nan
    if inside_x.size == shape[2] and inside_y.size == shape[1]:
        return values
    out = np.full(shape, np.nan, np.float32)
    out[:, inside_y[0] : inside_y[-1] + 1, inside_x[0] : inside_x[-1] + 1] = values
    return out


@dataclass(frozen=True)
class _Places:
    """Where the centre of each destination pixel falls in the source, in its pixels (GDAL's
    convention: 0 is the first pixel's left or top edge), as ``float32`` maps."""

    columns: np.ndarray
    rows: np.ndarray

    @classmethod
    def of(cls, grid: _SourceGrid, centres: _Centres) -> _Places | None:
        """The places of ``centres`` (a separable warp's) in a source of unrotated pixels."""
        left, a, b, top, d, e = grid.geo
        if b != 0 or d != 0:
            return None
        columns = ((centres.xs - left) / a).astype(np.float32)
        rows = ((centres.ys - top) / e).astype(np.float32)
        shape = (len(rows), len(columns))
        return cls(np.broadcast_to(columns, shape), np.broadcast_to(rows[:, None], shape))

    def scaled(self, x: float, y: float) -> _Places:
        """These places in an overview of ``x`` and ``y`` times the pixels a side."""
        return _Places(self.columns * np.float32(x), self.rows * np.float32(y))

    @cached_property
    def extent(self) -> tuple[float, float, float, float]:
        """The least and greatest column, the least and greatest row."""
        return (
            float(self.columns.min()),
            float(self.columns.max()),
            float(self.rows.min()),
            float(self.rows.max()),
        )

    def inside(self, grid: _SourceGrid) -> bool:
        """Whether every place lies in the source of ``grid``."""
        left, right, top, bottom = self.extent
        return left >= 0 and right <= grid.width and top >= 0 and bottom <= grid.height

    def window(self, grid: _SourceGrid) -> Window | None:
        """The window of the source of ``grid`` these places read (a pixel more each side),
        within it; None when they all lie outside it."""
        left, right, top, bottom = self.extent
        col0, row0 = max(int(np.floor(left)) - 1, 0), max(int(np.floor(top)) - 1, 0)
        col1 = min(int(np.ceil(right)) + 1, grid.width)
        row1 = min(int(np.ceil(bottom)) + 1, grid.height)
        if col1 <= col0 or row1 <= row0:
            return None
        return Window(col0, row0, col1 - col0, row1 - row0)

    def maps(self, window: Window) -> tuple[np.ndarray, np.ndarray]:
        """These places as OpenCV's maps into ``window`` (0: its first pixel's centre)."""
        return (
            self.columns - np.float32(window.col_off + 0.5),
            self.rows - np.float32(window.row_off + 0.5),
        )

    def bounds(self, grid: _SourceGrid) -> tuple[float, float, float, float]:
        """The box of these places in the CRS of the source of ``grid`` (unrotated)."""
        left, a, _, top, _, e = grid.geo
        first, last, top_row, bottom_row = self.extent
        return left + first * a, top + bottom_row * e, left + last * a, top + top_row * e


def _places(source: _SourceGrid, crs: str, dst: Affine, width: int, height: int) -> _Places | None:
    """The places of the centres of the ``width`` x ``height`` pixels of ``dst`` (in ``crs``)
    in ``source`` (unrotated): transformed at a grid of points
    :data:`_SPACING` pixels apart and interpolated between, as GDAL's approximating transformer
    does. None where the interpolation is more than :data:`_GRID_ERROR` pixels off at the grid
    cells' centres (GDAL's warp draws it), or a point has no place in the source's CRS."""
    left, a, b, top, d, e = source.geo
    if b != 0 or d != 0 or source.crs is None:
        return None
    axis_x, axis_y = _axis(width), _axis(height)
    cols, rows = _grid_points(width, height)
    xs, ys = dst.c + cols * dst.a, dst.f + rows * dst.e  # dst: a north-up area's grid
    if _axes(source.crs, crs) != "same":
        moved = _transformed(crs, source.crs, xs, ys)
        if moved is None:
            return None
        xs, ys = moved
    src_cols, src_rows = (xs - left) / a, (ys - top) / e
    shape = (len(axis_y), len(axis_x))
    count = shape[0] * shape[1]
    maps = []
    for values in (src_cols, src_rows):
        grid = values[:count].reshape(shape)
        between = (grid[:-1, :-1] + grid[1:, :-1] + grid[:-1, 1:] + grid[1:, 1:]) / 4
        mids = values[count:].reshape(shape[0] - 1, shape[1] - 1)
        if np.abs(between - mids).max() > _GRID_ERROR:
            return None
        # OpenCV's linear resize puts the grid's points where _axis placed them (the area's
        # pixels a spacing in from the resized image's edges); float32 from the first point
        origin = grid[0, 0]
        size = (shape[1] * _SPACING, shape[0] * _SPACING)
        resized = cv2.resize(
            (grid - origin).astype(np.float32), size, interpolation=cv2.INTER_LINEAR
        )
        near = resized[_SPACING : _SPACING + height, _SPACING : _SPACING + width]
        maps.append(near + np.float32(origin))
    return _Places(*maps)


@lru_cache(maxsize=16)
def _axis(size: int) -> np.ndarray:
    """Where on an axis of ``size`` pixels (0: the first pixel's centre) :func:`_places` puts
    its points: :data:`_SPACING` apart, the first half a spacing before the first pixel, the
    last past the last pixel (read-only)."""
    count = int(np.ceil(size / _SPACING + 1.5))
    at = (np.arange(count) + 0.5) * _SPACING - 0.5 - _SPACING
    at.flags.writeable = False
    return at


@lru_cache(maxsize=16)
def _grid_points(width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """The columns and rows (pixel coordinates: 0 the first pixel's left or top edge) of the
    points :func:`_places` transforms: its grid (:func:`_axis`), then the cells' centres, where
    the interpolation is checked (read-only)."""
    steps_x, steps_y = _axis(width), _axis(height)
    mid_x = (steps_x[:-1] + steps_x[1:]) / 2
    mid_y = (steps_y[:-1] + steps_y[1:]) / 2
    grid_cols, grid_rows = np.meshgrid(steps_x, steps_y)
    mid_cols, mid_rows = np.meshgrid(mid_x, mid_y)
    cols = np.concatenate([grid_cols.ravel(), mid_cols.ravel()]) + 0.5
    rows = np.concatenate([grid_rows.ravel(), mid_rows.ravel()]) + 0.5
    cols.flags.writeable = rows.flags.writeable = False
    return cols, rows


def _at_places(
    source: DatasetReader,
    grid: _SourceGrid,
    read: Sequence[int],
    nodata: float | None,
    places: _Places,
    resampling: Resampling,
) -> np.ndarray | None:
    """The ``read`` bands of ``source`` (its ``grid``) at ``places``, ``bilinear``: each from
    the four source pixels around it weighted by their distance; ``nearest``: the pixel it
    falls in (:func:`_picked`). Float32, NaN where there is no data; None where this read is
    not GDAL's (masks, a nodata its data type does not take, a window far wider than drawn):
    GDAL's warp draws it.

    As GDAL's bilinear warp: a place outside the source, or in a pixel with no data (every
    band read ``nodata``, or NaN), has no data; else a pixel around it with no data weighs
    nothing and the others are weighed again. A source alpha band read last weighs each pixel
    by its opacity, and is itself interpolated. The weights are OpenCV's (``remap``: a 32nd of
    a pixel); GDAL's warp reading more pixels than it draws widens its kernel (an average),
    this read does not: an overview is read where GDAL's warp would read one.
    """
    alpha = nodata is None and len(read) > 1 and _is_alpha(source, read[-1])
    bands = read[:-1] if alpha else read
    if not alpha and not all(grid.plain[band - 1] for band in read):
        return None
    if nodata is not None and not _takes_nodata(np.dtype(grid.dtypes[read[0] - 1]), nodata):
        return None
    shape = (len(read), *places.columns.shape)
    window = places.window(grid)
    if window is None:
        return np.full(shape, np.nan, np.float32)
    if window.width * window.height > _NEAREST_SPAN * shape[1] * shape[2]:
        return None
    data = source.read(list(read), window=window)
    values = data[: len(bands)].astype(np.float32)
    if resampling is Resampling.nearest:
        return _picked(values, data, nodata, places.maps(window), alpha)
    weight = data[-1].astype(np.float32) * (1 / 255) if alpha else None
    holes = np.zeros(data.shape[1:], bool)
    if nodata is not None:
        holes |= _is_nodata(data, nodata).all(axis=0)
    if values.dtype.kind == "f" and data.dtype.kind == "f":
        holes |= ~np.isfinite(values).all(axis=0)
    if holes.any():
        weight = np.ones(data.shape[1:], np.float32) if weight is None else weight
        weight[holes] = 0
        values[:, holes] = 0
    if weight is not None:
        values *= weight
    else:
        weight = np.ones(data.shape[1:], np.float32)
    # outside the window is 0: no weight
    maps = places.maps(window)
    *moved, total = _remapped([*values, weight], maps, cv2.INTER_LINEAR)
    # the pixel each place falls in (outside the source: none) must have data itself
    (held,) = _remapped([weight], maps, cv2.INTER_NEAREST)
    valid = (held > _LEAST_WEIGHT) & (total > _LEAST_WEIGHT)
    out = np.empty(shape, np.float32)
    with np.errstate(all="ignore"):
        for i, band in enumerate(moved):
            np.divide(band, total, out=out[i])
    if alpha:
        out[-1] = total * 255
    out[:, ~valid] = np.nan
    return out


def _remapped(
    layers: list[np.ndarray],
    maps: tuple[np.ndarray, np.ndarray],
    how: int,
    outside: float = 0,
) -> list[np.ndarray]:
    """Each of ``layers`` (2-D, one data type) at OpenCV's ``maps`` by ``how``, four a call
    (OpenCV's most channels); ``outside`` where a place is outside them."""
    out: list[np.ndarray] = []
    for first in range(0, len(layers), 4):
        chunk = layers[first : first + 4]
        moved = cv2.remap(
            np.dstack(chunk) if len(chunk) > 1 else chunk[0],
            *maps,
            how,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=(outside,) * 4,
        )
        out.extend(np.moveaxis(moved.reshape(*moved.shape[:2], -1), -1, 0))
    return out


def _picked(
    values: np.ndarray,
    data: np.ndarray,
    nodata: float | None,
    maps: tuple[np.ndarray, np.ndarray],
    alpha: bool,
) -> np.ndarray:
    """The ``values`` (of ``data``, a window; an alpha band last when ``alpha``) of the pixel
    each place of ``maps`` falls in; NaN outside the window or where the pixel has no data
    (every band ``nodata``, NaN, alpha 0)."""
    holes = np.zeros(values.shape[1:], np.float32)
    if nodata is not None:
        holes[_is_nodata(data, nodata).all(axis=0)] = 1
    if alpha:
        holes[data[-1] == 0] = 1
    if values.dtype.kind == "f" and data.dtype.kind == "f":
        holes[~np.isfinite(values).all(axis=0)] = 1
    layers = [*values, data[-1].astype(np.float32)] if alpha else list(values)
    # OpenCV's nearest: the pixel whose centre is nearest, the one each place falls in; outside
    # the window a hole
    *picked, outside = _remapped([*layers, holes], maps, cv2.INTER_NEAREST, outside=1)
    out = np.stack(picked)
    out[:, outside > 0] = np.nan
    return out


def _as_they_are(
    rendering: Rendering, ds: DatasetReader, bands: Sequence[int], resampling: Resampling
) -> bool:
    """Whether ``rendering`` draws 8-bit ``bands`` as they are: no expression, algorithm,
    stretch, colour map or nodata of its own; ``nearest`` or ``bilinear``."""
    return (
        not (rendering.expression or rendering.algorithm or rendering.rescale)
        and not (rendering.colormap or rendering.colormap_name)
        and rendering.nodata is None
        and len(bands) in (1, 3)
        and all(ds.dtypes[band - 1] == "uint8" for band in bands)
        and resampling in (Resampling.nearest, Resampling.bilinear)
    )


def _resampled_bytes(
    source: DatasetReader,
    grid: _SourceGrid,
    read: Sequence[int],
    nodata: float | None,
    places: _Places,
    resampling: Resampling,
) -> np.ndarray | None:
    """The RGBA pixels of the 8-bit bands ``read`` (1 as gray, or 3; an alpha band last, or
    ``nodata``) of ``source`` at ``places``, as :func:`_at_places` then :func:`_colour` draw them:
    a place in a pixel without data is transparent, a neighbour without data weighs nothing
    (bilinear: the bands weighed by the mask and divided by its interpolation)."""
    shape = places.columns.shape
    window = places.window(grid)
    if window is None:
        return np.zeros((*shape, 4), np.uint8)
    if window.width * window.height > _NEAREST_SPAN * shape[0] * shape[1]:
        return None
    data = source.read(list(read), window=window)
    alpha = len(read) in (2, 4)
    colours = data[:-1] if alpha else data
    if alpha:
        mask = data[-1]
        whole = bool(mask.min() == 255)
    elif nodata is not None:
        holes = colours[0] == int(nodata)
        for band in colours[1:]:
            holes &= band == int(nodata)
        mask = holes.view(np.uint8) - np.uint8(1)  # 255 with data, 0 without
        whole = not holes.any()
    else:
        mask = np.full(data.shape[1:], 255, np.uint8)
        whole = True
    inside = places.inside(grid)
    if resampling is Resampling.bilinear and not whole:
        # weighed by the mask: a pixel without data adds nothing
        colours = (colours.astype(np.uint16) * mask // 255).astype(np.uint8)
    image = np.dstack([*colours, mask])
    maps = places.maps(window)
    if resampling is Resampling.nearest:
        how, border = cv2.INTER_NEAREST, cv2.BORDER_CONSTANT  # outside: transparent
    else:
        # the window ends inside the source a pixel past every place: past the source's
        # edge, its edge again (the pixels outside weigh nothing, as in GDAL's warp)
        how, border = cv2.INTER_LINEAR, cv2.BORDER_REPLICATE
    moved: np.ndarray = cv2.remap(image, *maps, how, borderMode=border)
    moved = moved.reshape(*shape, -1)
    if whole and inside and moved.shape[-1] == 4:
        return moved  # every place in a pixel with data, and every neighbour: opaque
    if moved.shape[-1] == 4:
        rgba = moved
    else:  # one band: gray
        rgba = np.empty((*shape, 4), np.uint8)
        rgba[..., :3] = moved[..., :1]
        rgba[..., 3] = moved[..., 1]
    if resampling is Resampling.bilinear:
        weight = rgba[..., 3].copy()
        # the pixel each place falls in must have data
        held = cv2.remap(mask, *maps, cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT)
        held = held.reshape(shape)
        # a place near a pixel without data: divided by its weight
        partial = (weight > 0) & (weight < 255)
        if partial.any():
            scaled = rgba[..., :3][partial].astype(np.float32) * (255.0 / weight[partial, None])
            rgba[..., :3][partial] = np.minimum(np.round(scaled), 255).astype(np.uint8)
        rgba[..., 3] = np.where(held > 0, weight if alpha else 255, 0)
    # a transparent pixel is 0 in every channel (its four bytes as one word)
    np.copyto(rgba.view(np.uint32)[..., 0], 0, where=rgba[..., 3] == 0)
    return rgba


def _is_alpha(source: DatasetReader, band: int) -> bool:
    """Whether ``band`` of ``source`` is its alpha band."""
    return bool(source.colorinterp[band - 1] is ColorInterp.alpha)


def _takes_nodata(dtype: np.dtype[Any], nodata: float) -> bool:
    """Whether :func:`_is_nodata` compares ``dtype`` with ``nodata`` as GDAL's warp does: a
    number in the type's range (a whole one for an integer type), or NaN for a float."""
    if dtype.kind == "f":
        return bool(np.isnan(nodata) or abs(nodata) <= np.finfo(dtype).max)
    limits = np.iinfo(dtype)
    return bool(np.isfinite(nodata) and float(nodata).is_integer()) and (
        limits.min <= nodata <= limits.max
    )


def _is_nodata(data: np.ndarray, nodata: float) -> np.ndarray:
    """Where ``data`` is ``nodata``, as GDAL's warp tells: NaN for NaN; a float within
    ``ARE_REAL_EQUAL``'s tolerance (2 float epsilons of the sum), in the data's type."""
    found: np.ndarray
    if np.isnan(nodata):
        found = np.isnan(data)
    elif data.dtype.kind != "f":
        found = data == int(nodata)
    else:
        value = data.dtype.type(nodata)
        with np.errstate(all="ignore"):
            near = np.abs(data - value) < _FLOAT32_EPSILON * np.abs(data + value) * 2
        found = (data == value) | near
    return found


def _destination(area: RenderArea, buffer: int) -> tuple[str, Affine, int, int]:
    """The CRS, grid, width and height a read of ``area`` fills (``buffer`` pixels past each
    side too)."""
    minx, miny, maxx, maxy = area.bbox
    resx, resy = (maxx - minx) / area.width, (maxy - miny) / area.height
    dst = Affine(resx, 0, minx - buffer * resx, 0, -resy, maxy + buffer * resy)
    return area.srs or _WEB_MERCATOR, dst, area.width + 2 * buffer, area.height + 2 * buffer


def _read_bands(ds: DatasetReader, bands: Sequence[int], nodata: float | None) -> list[int]:
    """The bands of ``ds`` a read of ``bands`` takes: its alpha band too, last, when it has one
    and no nodata is given (GDAL's warp's source alpha)."""
    interp = list(ds.colorinterp)
    if ColorInterp.alpha in interp and nodata is None:
        return [*bands, interp.index(ColorInterp.alpha) + 1]
    return list(bands)


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


def _evaluate(rendering: Rendering, bands: Sequence[int], data: np.ndarray) -> np.ndarray:
    """The blocks of the rendering's expression over ``data`` (NaN where a band has none)."""
    values = {f"b{band}": data[i] for i, band in enumerate(bands)}
    blocks = (rendering.expression or "").split(";")
    result = np.empty((len(blocks), *data.shape[1:]), np.float32)
    with np.errstate(all="ignore"):
        for i, block in enumerate(blocks):
            result[i] = numexpr.evaluate(block, local_dict=values)  # a constant: everywhere
    result[~np.isfinite(result)] = np.nan
    return result


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
    """The output of the rendering's hillshade or slope over ``band`` (NaN where no data),
    less the buffer (an encoding is :func:`_encoding`'s)."""
    name = rendering.algorithm
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
        out = values - lo
        out *= 255.0 / (hi - lo)
        return np.clip(out, 0, 255, out=out)


def _bytes(values: np.ndarray) -> np.ndarray:
    """``values`` (0..255, or NaN: 0) rounded to bytes."""
    out = np.round(values)
    out[np.isnan(out)] = 0
    return out.astype(np.uint8)


@lru_cache(maxsize=32)
def _colormap_table(name: str) -> np.ndarray:
    """rio-tiler's colour map ``name``: its 256 RGBA colours, each as one uint32 (read-only)."""
    colours = cmap.get(name)
    table = np.array([colours[i] for i in range(256)], np.uint8).view(np.uint32).ravel()
    table.flags.writeable = False
    return table


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
    if rendering.colormap_name:
        # clipped, NaN as 0 (an infinity is clipped as its largest float would be)
        index = np.clip(values, 0, 255)
        index[np.isnan(index)] = 0
        looked_up: np.ndarray = _colormap_table(rendering.colormap_name)[index.astype(np.uint8)]
        return looked_up.view(np.uint8).reshape(*values.shape, 4)
    rgba = np.zeros((*values.shape, 4), np.uint8)
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
    data: np.ndarray,
    alpha: np.ndarray | None,
    rendering: Rendering,
    bands: Sequence[int],
    dtypes: Sequence[str],
    statistics: list[dict[str, Any]],
    area: RenderArea,
    buffer: int,
) -> np.ndarray:
    """The RGBA pixels of ``data`` (the bands read, NaN where they have no data, ``buffer``
    pixels past each side)."""
    values = data
    if rendering.expression:
        values = _evaluate(rendering, bands, data)
    if rendering.algorithm:
        inner = values[0, buffer : values.shape[1] - buffer, buffer : values.shape[2] - buffer]
        has_data = np.isfinite(inner)
        if alpha is not None:
            alpha = alpha[buffer : alpha.shape[0] - buffer, buffer : alpha.shape[1] - buffer]
        if rendering.algorithm in ("terrainrgb", "terrarium"):
            # transparent where the DEM has no data (as TiTiler's), but its colour is 0 m there:
            # MapLibre's raster-dem reads the colour alone (transparent black is -10000 m)
            encoded = _encoding(rendering, np.nan_to_num(inner))
            if alpha is not None:
                has_data &= np.nan_to_num(alpha) > 0
            rgba = np.empty((*has_data.shape, 4), np.uint8)
            rgba[..., :3] = np.moveaxis(encoded, 0, -1)
            rgba[..., 3] = has_data.view(np.uint8) * np.uint8(255)
            return rgba
        values = _algorithm(rendering, values[0], area, buffer)
        values[:, ~has_data] = np.nan
    valid = np.isfinite(values).all(axis=0)
    if rendering.colormap_name or rendering.colormap:
        single = values[0]
        if rendering.colormap_name or rendering.rescale:
            lo_hi = _ranges(rendering, bands[:1], dtypes[:1], statistics, 1)[0]
            single = _stretch(single, *lo_hi) if lo_hi else single
        rgba = _lookup(np.where(valid, single, 0), rendering)
        if rendering.colormap_name:
            # the colour's alpha, none where there is no data (one uint32 a pixel)
            opaque = np.array([255, 255, 255, 0], np.uint8).view(np.uint32)
            pixels = rgba.view(np.uint32)[..., 0]
            pixels[~valid] &= opaque
        else:
            rgba[..., 3] = np.where(valid, rgba[..., 3], 0)
        return _with_alpha(rgba, alpha)
    ranges = _ranges(rendering, bands, dtypes, statistics, len(values))
    drawn = range(3) if len(values) >= 3 else range(1)  # one band (or two): gray
    channels = []
    for i in drawn:
        lo_hi = ranges[i]
        channels.append(
            _bytes(_stretch(values[i], *lo_hi) if lo_hi else np.clip(values[i], 0, 255))
        )
    return _rgba(channels, valid, alpha)


def _encoding(rendering: Rendering, heights: np.ndarray) -> np.ndarray:
    """Terrain-RGB or Terrarium of ``heights`` (3, rows, columns of bytes)."""
    if rendering.algorithm == "terrainrgb":
        return algorithms.terrain_rgb(
            heights,
            interval=rendering.algorithm_value("interval"),
            baseval=rendering.algorithm_value("baseval"),
        )
    return algorithms.terrarium(heights)


def _rgba(channels: list[np.ndarray], valid: np.ndarray, alpha: np.ndarray | None) -> np.ndarray:
    """The RGBA pixels of three bytes, or one as gray, opaque where ``valid`` (transparent and
    black elsewhere), times the source's ``alpha``."""
    rgba = np.empty((*valid.shape, 4), np.uint8)
    opaque = valid.view(np.uint8)
    for i, channel in enumerate(channels * 3 if len(channels) == 1 else channels):
        np.multiply(channel, opaque, out=rgba[..., i])
    np.multiply(opaque, np.uint8(255), out=rgba[..., 3])
    return _with_alpha(rgba, alpha)


def _with_alpha(rgba: np.ndarray, alpha: np.ndarray | None) -> np.ndarray:
    """``rgba`` with its alpha times the source's alpha band (when it has one)."""
    if alpha is not None:
        scaled = rgba[..., 3] * (np.nan_to_num(alpha).clip(0, 255) / 255.0)
        rgba[..., 3] = np.round(scaled).astype(np.uint8)
        rgba[rgba[..., 3] == 0, :3] = 0
    return rgba
