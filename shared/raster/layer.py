"""Raster layers: where their files live, and their configuration (spec 4.4, section 6).

Configuring a layer checks its files, makes a preview (one tenth of the resolution, with
overviews) of each, a mosaic VRT (and a VRT of the previews) when the layer is a folder of
several files, overviews of the source when it has none (:mod:`shared.raster.overviews`), reads
location and CRS, and writes the Mapnik XML to ``<workDir>/map/mapnik/<raster id>.xml``.
Derived files go to ``<workDir>/map/derived/<id>/``, so the user's raster folders stay as they
are. The sources are read from the raster store (:mod:`shared.raster.store`); from a bucket
they are first copied into the build folder (``source/``), since Mapnik's GDAL reads local files
only, and the build is made from those copies. Every stage is a line on the job's stream. The
layer's resampling (chosen at configuration) draws it and computes its previews and overviews.

A (re)configuration builds its previews and overviews into a new build folder
``<derived>/<id>/b-<hex>/`` and then swaps the XML (one atomic rename) to point at it: until the
swap the old configuration keeps serving tiles, and a failed rebuild leaves the old layer as it
was. Only then are the layer's old build folders and its own tiles removed. One configuration of
a layer runs at a time (a lock file in its derived folder).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import rasterio
from rasterio.enums import ColorInterp
from rasterio.warp import transform_bounds

from shared.base.files import write_atomic
from shared.base.formats import PNG_TILE, tile_url_templates, tilejson_url
from shared.errors import InvalidInputError, UnprocessableError
from shared.jobs import JobReporter
from shared.raster.catalog import layer_files
from shared.raster.gdal import GDAL_ERRORS, gdal_message
from shared.raster.geo import extent_4326, proj4
from shared.raster.overviews import OVERVIEWS_VRT, build_overviews, has_overviews
from shared.raster.paths import encode_id, normalise_path, raster_root
from shared.raster.preview import PREVIEW_FACTOR, SMALL_RASTER_PX, write_preview
from shared.raster.rendering import Rendering, rendering_from_json
from shared.raster.resampling import DEFAULT_RESAMPLING, LayerResampling
from shared.raster.stat import describe_file
from shared.raster.statistics import band_statistics, default_rendering
from shared.raster.store import FileRasterStore, RasterStore, StoredItem
from shared.raster.style import WEB_MERCATOR, StyleSpec, style_xml
from shared.raster.vrt import RasterPath, mosaic_vrt
from shared.workdir import WorkDir

__all__ = ["LayerLocation", "configure_layer", "locate_layer", "mosaic_source"]

#: The overviews are drawn once the map's pixels are at least this many of the source's: there
#: the first level (1/2) is as fine as the map, and the source would be read at a reduction.
OVERVIEW_FROM = 2
_RES_Z0 = 2 * math.pi * 6378137 / 256  # metres per pixel of Web Mercator zoom 0
_METRES_PER_SCREEN_PX = 0.00028  # Mapnik's scale denominator = resolution / this
_MANIFEST = "manifest.json"
#: 2: builds have overviews, and the manifest records the layer's choices
_MANIFEST_VERSION = 2
_BUILD_PREFIX = "b-"
#: The mosaic VRT of a folder layer (in its derived folder, or in the build over copies).
MOSAIC_VRT = "mosaic.vrt"
#: The folder of a build that holds the copies of sources Mapnik cannot read where they are.
SOURCES_DIR = "source"


@dataclass(frozen=True)
class LayerLocation:
    """The files of a raster layer."""

    rel_path: str
    raster_id: str
    name: str
    is_dir: bool
    derived_dir: Path
    xml_path: Path
    tile_dir: Path


def locate_layer(
    work_dir: Path, rel_path: str, *, rasters: RasterStore | None = None
) -> LayerLocation:
    """Where the layer at ``rel_path`` (relative to the raster root) and its outputs live.

    The path is normalised first (:func:`~shared.raster.paths.normalise_path`), so ``./x``,
    ``x/`` and ``x`` are one layer with one id.

    Args:
        work_dir: the service's work dir (the layer's outputs are there).
        rel_path: the layer's file or folder.
        rasters: the raster store (default: the folder ``<workDir>/map/raster``).

    Raises:
        InvalidInputError: the path is empty, not normal, or leads outside the raster root.
        NotFoundError: nothing at the path.
        UnavailableError: the object storage cannot be reached.
    """
    rel, dirs = normalise_path(rel_path), WorkDir(work_dir)
    source = (rasters or FileRasterStore(dirs.raster)).item(rel)
    raster_id = encode_id(rel)
    return LayerLocation(
        rel_path=rel,
        raster_id=raster_id,
        name=source.name,
        is_dir=source.is_dir,
        derived_dir=dirs.derived / raster_id,
        xml_path=dirs.mapnik / f"{raster_id}.xml",
        tile_dir=dirs.rtile / raster_id,
    )


def mosaic_source(where: LayerLocation, files: Sequence[StoredItem]) -> Path:
    """The mosaic VRT of a folder layer's files where they are stored, written (again) when it
    is missing or out of date.

    Raises:
        UnprocessableError: the files do not fit together.
    """
    return _mosaic(where.derived_dir / MOSAIC_VRT, [f.gdal_path for f in files])


def _mosaic(vrt: Path, files: Sequence[RasterPath]) -> Path:
    """The mosaic VRT ``vrt`` of ``files``, written when missing or different."""
    xml = mosaic_vrt(files, vrt.parent)
    if not vrt.is_file() or vrt.read_text() != xml:
        write_atomic(vrt, xml)
    return vrt


@dataclass(frozen=True)
class _Choices:
    """What a configuration was asked for besides its files; recorded in the manifest."""

    resampling: LayerResampling
    overviews: bool


def _manifest(files: list[StoredItem], choices: _Choices) -> dict[str, Any]:
    return {
        "version": _MANIFEST_VERSION,
        # paths, sizes and mtimes (ETags in a bucket): a changed source is built again
        "files": [f.signature for f in files],
        "resampling": choices.resampling.value,
        "overviews": choices.overviews,
    }


def _compressed(files: list[Path]) -> str:
    kinds = set()
    for path in files:
        with rasterio.open(path) as ds:
            kinds.add(str(ds.compression.value) if ds.compression else "none")
    return ", ".join(sorted(kinds))


class TileCache(Protocol):
    """A cache of tiles (``shared.tiles.store``): the layer's are dropped when it changes."""

    def drop_style(self, style: str) -> None:
        """Forget every tile of the layer ``style``."""


def configure_layer(
    work_dir: Path,
    rel_path: str,
    report: JobReporter,
    *,
    lang: str,
    url_prefix: str,
    refresh: bool,
    stores: Sequence[TileCache],
    resampling: LayerResampling | None = None,
    overviews: bool = True,
    rasters: RasterStore | None = None,
    rendering: Rendering | None = None,
) -> dict[str, Any]:
    """Build (or reuse) the configuration of a raster layer, reporting each stage.

    Args:
        work_dir: the service's work dir.
        rel_path: the raster file or folder, relative to ``<workDir>/map/raster``.
        report: the job's reporter.
        lang: the language put into the tile URL.
        url_prefix: where the API serves its routes (it gives it); the tile URL starts with it.
        refresh: rebuild previews, VRTs, overviews and XML even when they are up to date
            (``nocache=1``).
        stores: the tile caches that drop the layer's tiles when its configuration changes
            (the file cache under ``<workDir>/map/rtile``, and the bucket's when there is one).
        resampling: how the layer is drawn, and its previews and overviews computed; a
            configuration made with another is rebuilt. None: as the layer's configuration has
            it (a layer not configured yet: bilinear).
        overviews: build overviews for a source without any (False: draw it as configurations
            did before overviews, for comparisons).
        rasters: where the sources are (default: the folder ``<workDir>/map/raster``).
        rendering: how the layer is drawn (TiTiler's parameters, over its default drawing).
            None: as the layer's configuration has it (a layer not configured yet: its
            default, :func:`~shared.raster.statistics.default_rendering`).

    Returns:
        The raster configuration result (spec 2.2), ``layer``, the id of the configuration,
        ``tilejson``, the URL of its TileJSON, ``statistics`` of its bands and ``rendering``,
        how it is drawn (null: as 8-bit imagery, by Mapnik).

    Raises:
        NotFoundError: no raster at the path.
        UnprocessableError: a file cannot be read, or the files do not fit together.
        UnavailableError: a tile cache could not drop the layer's tiles, or the object storage
            of the sources cannot be reached.
    """
    t0 = time.monotonic()
    rasters = rasters or FileRasterStore(raster_root(work_dir))
    report.line(f"Start raster: {rel_path}")
    where = locate_layer(work_dir, rel_path, rasters=rasters)
    report.line(f"id: {where.raster_id}")
    report.line(f"proj4 (map): {WEB_MERCATOR}")
    files = layer_files(rasters, where.rel_path)
    descriptors = [describe_file(rasters, file) for file in files]
    broken = [d for d in descriptors if d["err"]]
    if broken:
        raise UnprocessableError(f"{broken[0]['name']}: {broken[0]['err']}", file=broken[0]["name"])
    report.line(f"Raster file check: {len(files)} file(s) readable", progress=0.1)

    kept = _kept(where.derived_dir)
    chosen = resampling or kept.resampling or _default_resampling(files[0])
    choices = _Choices(chosen, overviews)
    # the layer's resampling is its one resampling (drawings, previews, overviews)
    rendering = kept.rendering if rendering is None else replace(rendering, resampling=None)
    manifest = _manifest(files, choices)
    with _layer_lock(where.derived_dir):
        current = None if refresh else _current_build(where.derived_dir, manifest)
        reuse = current is not None
        build = current or where.derived_dir / f"{_BUILD_PREFIX}{uuid.uuid4().hex}"
        try:
            built = _build(
                where,
                _Sources(rasters, files, descriptors),
                build,
                report,
                urls=tile_url_templates(url_prefix, where.raster_id, lang),
                reuse=reuse,
                choices=choices,
                rendering=rendering,
            )
        except BaseException:
            if build != current:  # a failed rebuild leaves the old layer as it was
                shutil.rmtree(build, ignore_errors=True)
            raise
        # the rendering chosen is kept, not compared: a new one rewrites the XML alone
        chosen_json = None if rendering is None or rendering.empty else rendering.to_json()
        kept_manifest = {**manifest, "rendering": chosen_json}
        size = _swap_in(work_dir, where, built.xml, build, kept_manifest, stores, reuse=reuse)
    report.line(f"XML size: {size} bytes")
    report.line(f"XML file: map/mapnik/{where.xml_path.name}")
    ms_xml = int((time.monotonic() - built.t_xml) * 1000)
    report.line(f"Total time: {int((time.monotonic() - t0) * 1000)}")
    report.line(f"Times: {built.times}, xml {ms_xml}ms")
    return {**built.result, "tilejson": tilejson_url(url_prefix, where.raster_id, lang)}


@dataclass(frozen=True)
class _Built:
    """A configuration ready to be swapped in: its XML, and what the job reports of it."""

    xml: str
    times: str
    t_xml: float
    result: dict[str, Any]


@contextlib.contextmanager
def _layer_lock(derived_dir: Path) -> Iterator[None]:
    """One configuration of a layer at a time (on this host, or a shared file system)."""
    derived_dir.mkdir(parents=True, exist_ok=True)
    with (derived_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass(frozen=True)
class _Kept:
    """What the layer's configuration chose, when it has one."""

    resampling: LayerResampling | None = None
    rendering: Rendering | None = None


def _kept(derived_dir: Path) -> _Kept:
    """The resampling and rendering of the layer's configuration (None: not chosen)."""
    path = derived_dir / _MANIFEST
    kept = json.loads(path.read_text()) if path.is_file() else {}
    known = {method.value for method in LayerResampling}
    method = kept.get("resampling")
    saved = kept.get("rendering")
    return _Kept(
        LayerResampling(method) if method in known else None,
        rendering_from_json(saved) if isinstance(saved, dict) else None,
    )


def _default_resampling(file: StoredItem) -> LayerResampling:
    """``nearest`` for a raster with a colour table (a tile shows only its colours), else the
    default."""
    try:
        with rasterio.open(file.gdal_path) as ds:
            palette = ds.colorinterp[0] is ColorInterp.palette
    except GDAL_ERRORS:
        palette = False
    return LayerResampling.NEAREST if palette else DEFAULT_RESAMPLING


def _current_build(derived_dir: Path, manifest: dict[str, Any]) -> Path | None:
    """The build folder of the layer's configuration, when its files and choices are the same
    (and it was made by this version of the configuration)."""
    path = derived_dir / _MANIFEST
    if not path.is_file():
        return None
    kept = json.loads(path.read_text())
    build = derived_dir / str(kept.get("build", ""))
    same = {key: kept.get(key) for key in manifest} == json.loads(json.dumps(manifest))
    return build if same and kept.get("build") and build.is_dir() else None


def _swap_in(
    work_dir: Path,
    where: LayerLocation,
    xml: str,
    build: Path,
    manifest: dict[str, Any],
    stores: Sequence[TileCache],
    *,
    reuse: bool,
) -> int:
    """Point the layer at ``build`` (one rename of its XML), then forget the old build and tiles.

    Returns:
        The size of the XML in bytes.
    """
    changed = not reuse or not where.xml_path.is_file() or where.xml_path.read_text() != xml
    size = write_atomic(where.xml_path, xml).st_size  # the swap: tiles come from the new build
    manifest_path = where.derived_dir / _MANIFEST
    if changed:
        # a new configuration must never be served from tiles of the old one
        try:
            for store in stores:
                store.drop_style(where.raster_id)
        except BaseException:
            # without the manifest the next run rebuilds, and so drops the tiles again
            manifest_path.unlink(missing_ok=True)
            raise
    write_atomic(manifest_path, json.dumps({**manifest, "build": build.name}))
    for old in where.derived_dir.glob(f"{_BUILD_PREFIX}*"):
        if old != build and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    return size


@dataclass(frozen=True)
class _Sources:
    """The files of a layer, where they are stored, and their descriptors (spec 2.3)."""

    rasters: RasterStore
    files: list[StoredItem]
    descriptors: list[dict[str, Any]]

    def local(self, build: Path, report: JobReporter, *, reuse: bool) -> list[Path]:
        """The files as Mapnik reads them: where they are, or copies fetched into ``build``."""
        if not self.rasters.remote:
            return self.rasters.local_files(self.files, build / SOURCES_DIR)
        report.line(
            f"Sources: {len(self.files)} file(s) of {self.rasters.describe()}"
            + (" (up to date)" if reuse else ", copying into the build")
        )
        local = self.rasters.local_files(self.files, build / SOURCES_DIR)
        report.line(f"Sources: {sum(p.stat().st_size for p in local)} bytes in the build")
        return local


def _build(
    where: LayerLocation,
    sources: _Sources,
    build: Path,
    report: JobReporter,
    *,
    urls: dict[str, str],
    reuse: bool,
    choices: _Choices,
    rendering: Rendering | None,
) -> _Built:
    """Make previews, VRTs and overviews in ``build`` (kept when ``reuse``), and the XML that
    uses them, drawn with ``rendering`` over the layer's default.

    ``urls`` are the layer's tile URL templates by format, for the result.
    """
    build.mkdir(parents=True, exist_ok=True)
    descriptors = sources.descriptors
    files = sources.local(build, report, reuse=reuse)
    t_preview = time.monotonic()
    previews = _previews(files, build, report, reuse=reuse, choices=choices)
    ms_preview = int((time.monotonic() - t_preview) * 1000)

    t_vrt = time.monotonic()
    if len(files) > 1:
        # over the copies in the build, or the files where they are (shared with the info)
        mosaic = build if sources.rasters.remote else where.derived_dir
        source = _mosaic(mosaic / MOSAIC_VRT, files)
        preview_source = build / "mosaic-preview.vrt"
        report.line(f"VRT: {len(files)} files -> {source.name}")
        write_atomic(preview_source, mosaic_vrt(previews, build))
        report.line(f"VRT preview: {len(previews)} previews -> {preview_source.name}")
    else:
        source, preview_source = files[0], previews[0]
        report.line("VRT: not needed (one file)")
    ms_vrt = int((time.monotonic() - t_vrt) * 1000)

    t_overviews = time.monotonic()
    overviews = _overviews(source, build, report, reuse=reuse, choices=choices)
    ms_overviews = int((time.monotonic() - t_overviews) * 1000)

    t_info = time.monotonic()
    with rasterio.open(source) as ds:
        crs, bounds, width, height = ds.crs, ds.bounds, ds.width, ds.height
        bands = ",".join(ci.name.capitalize() for ci in ds.colorinterp)
        nodata = ds.nodata
        if crs is None:
            raise UnprocessableError(f"{where.name} has no coordinate system")
        report.line(f"Bands: {bands}")
        epsg = crs.to_epsg()
        report.line(f"srid: {epsg if epsg is not None else 'none (custom CRS)'}")
        srs = proj4(crs)
        report.line(f"proj4: {srs}")
    report.line(f"Compressed: {_compressed(files)}")
    small = max(width, height) <= SMALL_RASTER_PX
    report.json({"smallRaster": small})
    report.json(descriptors)
    report.line(f"Size: {width}x{height} px, {sum(d['size'] for d in descriptors)} bytes")
    extent = extent_4326(crs, bounds)
    report.line(f"Bounds: {json.dumps(extent)}")
    # resolution in Web Mercator metres: the layer's width across its extent, per pixel
    merc = transform_bounds(crs, "EPSG:3857", *bounds, densify_pts=21)
    resolution = (merc[2] - merc[0]) / width
    zoom = max(0, round(math.log2(_RES_Z0 / resolution)))
    report.line(f"Raster zoom: {zoom} ({resolution:.3f} m/px)", progress=0.7)
    # the preview is drawn once the map's pixels are at least half the preview's
    preview = _Band("preview", PREVIEW_FACTOR / 2 * resolution)
    overview = _Band("overviews", OVERVIEW_FROM * resolution)
    drawn = [band for band, file in ((preview, not small), (overview, overviews)) if file]
    report.line(f"Raster scaling: {_scaling(choices.resampling, drawn, small)}")
    t_stats = time.monotonic()
    statistics, drawing = _drawing(source, overviews, rendering, choices.resampling)
    ms_stats = int((time.monotonic() - t_stats) * 1000)
    report.line(f"Statistics: {len(statistics)} band(s) in {ms_stats}ms")
    report.json({"statistics": statistics})
    report.line(f"Rendering: {json.dumps(drawing.to_json()) if drawing else 'as imagery'}")
    ms_info = int((time.monotonic() - t_info) * 1000)

    t_xml = time.monotonic()
    spec = StyleSpec(
        name=where.rel_path,
        bounds=extent,
        zoom=zoom,
        srs=srs,
        source=source,
        preview=None if small else preview_source,
        preview_min_scale=preview.scale,
        nodata=nodata,
        overviews=overviews,
        overview_min_scale=overview.scale,
        resampling=choices.resampling,
        rendering=drawing.to_json() if drawing else None,
        statistics=statistics,
    )
    xml = style_xml(spec, where.xml_path.parent)
    times = f"preview {ms_preview}ms, vrt {ms_vrt}ms, overviews {ms_overviews}ms, info {ms_info}ms"
    result = {
        "id": where.name,
        "layer": where.raster_id,
        "extent": extent,
        "url": urls[PNG_TILE.name],  # spec 2.2
        "urls": urls,  # every format and @2x: {"png": …, "webp": …, "jpg@2x": …}
        "statistics": statistics,
        "rendering": drawing.to_json() if drawing else None,
    }
    return _Built(xml, times, t_xml, result)


def _drawing(
    source: Path, overviews: Path | None, rendering: Rendering | None, resampling: LayerResampling
) -> tuple[list[dict[str, Any]], Rendering | None]:
    """The statistics of the bands of ``source`` (read through its ``overviews`` when built),
    and how the layer is drawn: ``rendering`` over the raster's default, with the layer's
    ``resampling``; None when nothing is chosen and Mapnik draws it as imagery.

    Raises:
        InvalidInputError: ``rendering`` names a band the raster does not have.
        UnprocessableError: the source cannot be read.
    """
    try:
        with rasterio.open(overviews or source) as reduced:
            statistics = band_statistics(reduced)
        with rasterio.open(source) as ds:  # its colour interpretation and table
            default = default_rendering(ds, statistics)
            count = ds.count
    except GDAL_ERRORS as exc:
        raise UnprocessableError(f"{source.name}: {gdal_message(exc)}", file=source.name) from exc
    chosen = rendering if rendering is not None and not rendering.empty else None
    if chosen is not None and chosen.bands_read and max(chosen.bands_read) > count:
        name = "expression" if chosen.expression else "bidx"
        raise InvalidInputError(
            f"{name}: band {max(chosen.bands_read)} does not exist (bands are 1..{count})",
            parameter=name,
        )
    if chosen is None and default is None:
        return statistics, None
    drawing = chosen.with_defaults(default) if chosen and default else (chosen or default)
    assert drawing is not None
    return statistics, replace(drawing, resampling=resampling)


def _previews(
    files: list[Path], build: Path, report: JobReporter, *, reuse: bool, choices: _Choices
) -> list[Path]:
    """The preview of each file, made in ``build`` (or kept there when ``reuse``)."""
    report.line(f"Start compression: {len(files)} file(s), previews 1/{PREVIEW_FACTOR}")
    previews = []
    for i, path in enumerate(files, start=1):
        preview = build / f"preview-{i:04d}-{path.stem}.tif"
        previews.append(preview)
        progress = 0.1 + 0.2 * i / len(files)
        if reuse and preview.is_file():
            report.line(f"Preview: {path.name} (up to date)", progress=progress)
            continue
        try:
            width, height = write_preview(path, preview, choices.resampling.gdal)
        except GDAL_ERRORS as exc:
            raise UnprocessableError(f"{path.name}: {gdal_message(exc)}", file=path.name) from exc
        report.line(f"Preview: {path.name} -> {width}x{height}", progress=progress)
    return previews


def _overviews(
    source: Path, build: Path, report: JobReporter, *, reuse: bool, choices: _Choices
) -> Path | None:
    """The VRT that draws ``source`` through the overviews built for it in ``build`` (or kept
    there when ``reuse``); None when the source is drawn as it is."""
    vrt = build / OVERVIEWS_VRT
    if not choices.overviews:
        report.line("Overviews: not built (asked so)", progress=0.65)
        return None
    if has_overviews(source):
        report.line(f"Overviews: {source.name} has its own", progress=0.65)
        return None
    if reuse and vrt.is_file():
        report.line("Overviews: (up to date)", progress=0.65)
        return vrt
    report.line(f"Overviews: of {source.name}, {choices.resampling}")

    def progress(text: str, done: float) -> None:
        report.line(text, progress=0.3 + 0.35 * done)

    built = build_overviews(source, build, choices.resampling.gdal, progress)
    if built is None:
        report.line("Overviews: not needed (the raster fits in a tile)", progress=0.65)
    return built


@dataclass(frozen=True)
class _Band:
    """A layer drawn from a Web Mercator resolution on (metres per map pixel)."""

    name: str
    resolution: float

    @property
    def scale(self) -> float:
        """Mapnik's scale denominator at that resolution."""
        return self.resolution / _METRES_PER_SCREEN_PX

    @property
    def zoom(self) -> int:
        """The last zoom drawn from the band."""
        return math.floor(math.log2(_RES_Z0 / self.resolution))


def _scaling(resampling: LayerResampling, drawn: list[_Band], small: bool) -> str:
    """What the job says of the layer's drawing: its resampling and which file at which zoom."""
    bands = [f"{b.name} up to zoom {b.zoom} (scale 1:{b.scale:.0f})" for b in drawn]
    bands.append("source above" if drawn else "source at every zoom")
    return f"{resampling}; {', '.join(bands)}{' (small raster)' if small else ''}"
