"""Raster layers: where their files live, and their configuration (spec 4.4, section 6).

Configuring a layer checks its files, makes a preview (one tenth of the resolution, with
overviews) of each, a mosaic VRT (and a VRT of the previews) when the layer is a folder of
several files, reads location and CRS, and writes the Mapnik XML to
``<workDir>/map/mapnik/<raster id>.xml``. Derived files go to ``<workDir>/map/derived/<id>/``,
so the user's raster folders stay as they are. Every stage is a line on the job's stream.

A (re)configuration builds its previews into a new build folder ``<derived>/<id>/b-<hex>/``
and then swaps the XML (one atomic rename) to point at it: until the swap the old
configuration keeps serving tiles, and a failed rebuild leaves the old layer as it was. Only
then are the layer's old build folders and its own tiles removed. One configuration of a layer
runs at a time (a lock file in its derived folder).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rasterio
from affine import Affine
from rasterio.enums import Resampling
from rasterio.warp import transform_bounds

from shared.cache import file_signature
from shared.errors import UnprocessableError
from shared.jobs import JobReporter
from shared.raster.catalog import layer_files
from shared.raster.files import atomic_path, write_atomic
from shared.raster.gdal import GDAL_ERRORS, gdal_message
from shared.raster.geo import extent_4326, proj4
from shared.raster.paths import encode_id, normalise_path, raster_root, resolve
from shared.raster.stat import describe_file
from shared.raster.style import WEB_MERCATOR, StyleSpec, style_xml
from shared.raster.vrt import mosaic_vrt
from shared.tiles.store import FileTileStore, TileStore
from shared.workdir import WorkDir

__all__ = ["LayerLocation", "configure_layer", "locate_layer", "mosaic_source", "tile_url"]

PREVIEW_FACTOR = 10
#: Rasters whose sides are all at most this many pixels are drawn from their source at every
#: zoom: their preview would be smaller than a tile.
SMALL_RASTER_PX = 2560
_RES_Z0 = 2 * math.pi * 6378137 / 256  # metres per pixel of Web Mercator zoom 0
_METRES_PER_SCREEN_PX = 0.00028  # Mapnik's scale denominator = resolution / this
_MANIFEST = "manifest.json"
_BUILD_PREFIX = "b-"


@dataclass(frozen=True)
class LayerLocation:
    """The files of a raster layer."""

    rel_path: str
    raster_id: str
    name: str
    source: Path
    derived_dir: Path
    xml_path: Path
    tile_dir: Path


def locate_layer(work_dir: Path, rel_path: str) -> LayerLocation:
    """Where the layer at ``rel_path`` (relative to the raster root) and its outputs live.

    The path is normalised first (:func:`~shared.raster.paths.normalise_path`), so ``./x``,
    ``x/`` and ``x`` are one layer with one id.

    Raises:
        InvalidInputError: the path is empty, not normal, or leads outside the raster root.
        NotFoundError: nothing at the path.
    """
    rel, dirs = normalise_path(rel_path), WorkDir(work_dir)
    source = resolve(dirs.raster, rel)
    raster_id = encode_id(rel)
    return LayerLocation(
        rel_path=rel,
        raster_id=raster_id,
        name=source.name,
        source=source,
        derived_dir=dirs.derived / raster_id,
        xml_path=dirs.mapnik / f"{raster_id}.xml",
        tile_dir=dirs.rtile / raster_id,
    )


def tile_url(url_prefix: str, raster_id: str, lang: str) -> str:
    """The tile URL template of a layer (spec 2.2) under the API's ``url_prefix``."""
    return f"{url_prefix}/rtile/{raster_id}/{lang}/{{z}}/{{x}}/{{y}}.png"


def mosaic_source(where: LayerLocation, files: list[Path]) -> Path:
    """The mosaic VRT of a folder layer, written (again) when it is missing or out of date.

    Raises:
        UnprocessableError: the files do not fit together.
    """
    vrt = where.derived_dir / "mosaic.vrt"
    xml = mosaic_vrt(files, where.derived_dir)
    if not vrt.is_file() or vrt.read_text() != xml:
        write_atomic(vrt, xml)
    return vrt


def _write_preview(src: Path, dst: Path) -> tuple[int, int]:
    with rasterio.open(src) as ds:
        width = max(1, math.ceil(ds.width / PREVIEW_FACTOR))
        height = max(1, math.ceil(ds.height / PREVIEW_FACTOR))
        data = ds.read(out_shape=(ds.count, height, width), resampling=Resampling.average)
        profile = {
            "driver": "GTiff",
            "dtype": ds.dtypes[0],
            "count": ds.count,
            "width": width,
            "height": height,
            "crs": ds.crs,
            "transform": ds.transform @ Affine.scale(ds.width / width, ds.height / height),
            "nodata": ds.nodata,
            "tiled": True,
            "blockxsize": 256,
            "blockysize": 256,
            "compress": "deflate",
        }
        colorinterp = ds.colorinterp
    with atomic_path(dst) as tmp:
        with rasterio.open(tmp, "w", **profile) as out:
            out.write(data)
            out.colorinterp = colorinterp
            factors = [2**i for i in range(1, 10) if min(width, height) / 2**i >= 128]
            if factors:
                out.build_overviews(factors, Resampling.average)
    return width, height


def _manifest(files: list[Path]) -> dict[str, Any]:
    return {"version": 1, "files": file_signature(files)}


def _compressed(files: list[Path]) -> str:
    kinds = set()
    for path in files:
        with rasterio.open(path) as ds:
            kinds.add(str(ds.compression.value) if ds.compression else "none")
    return ", ".join(sorted(kinds))


def configure_layer(
    work_dir: Path,
    rel_path: str,
    report: JobReporter,
    *,
    lang: str,
    url_prefix: str,
    refresh: bool,
    stores: Sequence[TileStore] | None = None,
) -> dict[str, Any]:
    """Build (or reuse) the configuration of a raster layer, reporting each stage.

    Args:
        work_dir: the service's work dir.
        rel_path: the raster file or folder, relative to ``<workDir>/map/raster``.
        report: the job's reporter.
        lang: the language put into the tile URL.
        url_prefix: where the API serves its routes (it gives it); the tile URL starts with it.
        refresh: rebuild previews, VRTs and XML even when they are up to date (``nocache=1``).
        stores: the tile caches that drop the layer's tiles when its configuration changes
            (default: the file cache under ``<workDir>/map/rtile``).

    Returns:
        The raster configuration result (spec 2.2) and ``layer``, the id of the configuration.

    Raises:
        NotFoundError: no raster at the path.
        UnprocessableError: a file cannot be read, or the files do not fit together.
        UnavailableError: a tile cache could not drop the layer's tiles.
    """
    t0 = time.monotonic()
    report.line(f"Start raster: {rel_path}")
    where = locate_layer(work_dir, rel_path)
    report.line(f"id: {where.raster_id}")
    report.line(f"proj4 (map): {WEB_MERCATOR}")
    files = layer_files(raster_root(work_dir), where.rel_path)
    descriptors = [describe_file(path) for path in files]
    broken = [d for d in descriptors if d["err"]]
    if broken:
        raise UnprocessableError(f"{broken[0]['name']}: {broken[0]['err']}", file=broken[0]["name"])
    report.line(f"Raster file check: {len(files)} file(s) readable", progress=0.1)

    manifest = _manifest(files)
    with _layer_lock(where.derived_dir):
        current = None if refresh else _current_build(where.derived_dir, manifest)
        reuse = current is not None
        build = current or where.derived_dir / f"{_BUILD_PREFIX}{uuid.uuid4().hex}"
        try:
            built = _build(
                where,
                files,
                descriptors,
                build,
                report,
                url=tile_url(url_prefix, where.raster_id, lang),
                reuse=reuse,
            )
        except BaseException:
            if build != current:  # a failed rebuild leaves the old layer as it was
                shutil.rmtree(build, ignore_errors=True)
            raise
        size = _swap_in(work_dir, where, built.xml, build, manifest, stores, reuse=reuse)
    report.line(f"XML size: {size} bytes")
    report.line(f"XML file: map/mapnik/{where.xml_path.name}")
    ms_xml = int((time.monotonic() - built.t_xml) * 1000)
    report.line(f"Total time: {int((time.monotonic() - t0) * 1000)}")
    report.line(f"Times: {built.times}, xml {ms_xml}ms")
    return built.result


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


def _current_build(derived_dir: Path, manifest: dict[str, Any]) -> Path | None:
    """The build folder of the layer's configuration, when its files are still the same."""
    path = derived_dir / _MANIFEST
    if not path.is_file():
        return None
    kept = json.loads(path.read_text())
    build = derived_dir / str(kept.get("build", ""))
    same = kept.get("files") == json.loads(json.dumps(manifest["files"]))
    return build if same and kept.get("build") and build.is_dir() else None


def _swap_in(
    work_dir: Path,
    where: LayerLocation,
    xml: str,
    build: Path,
    manifest: dict[str, Any],
    stores: Sequence[TileStore] | None,
    *,
    reuse: bool,
) -> int:
    """Point the layer at ``build`` (one rename of its XML), then forget the old build and tiles.

    Returns:
        The size of the XML in bytes.
    """
    changed = not reuse or not where.xml_path.is_file() or where.xml_path.read_text() != xml
    size = write_atomic(where.xml_path, xml)  # the swap: tiles come from the new build now
    manifest_path = where.derived_dir / _MANIFEST
    if changed:
        # a new configuration must never be served from tiles of the old one
        try:
            if stores is None:
                stores = [FileTileStore(WorkDir(work_dir).rtile)]
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


def _build(
    where: LayerLocation,
    files: list[Path],
    descriptors: list[dict[str, Any]],
    build: Path,
    report: JobReporter,
    *,
    url: str,
    reuse: bool,
) -> _Built:
    """Make previews and VRTs in ``build`` (kept when ``reuse``), and the XML that uses them.

    ``url`` is the layer's tile URL template, for the result.
    """
    build.mkdir(parents=True, exist_ok=True)
    t_preview = time.monotonic()
    report.line(f"Start compression: {len(files)} file(s), previews 1/{PREVIEW_FACTOR}")
    previews = []
    for i, path in enumerate(files, start=1):
        preview = build / f"preview-{i:04d}-{path.stem}.tif"
        previews.append(preview)
        if reuse and preview.is_file():
            report.line(f"Preview: {path.name} (up to date)", progress=0.1 + 0.4 * i / len(files))
            continue
        try:
            width, height = _write_preview(path, preview)
        except GDAL_ERRORS as exc:
            raise UnprocessableError(f"{path.name}: {gdal_message(exc)}", file=path.name) from exc
        report.line(
            f"Preview: {path.name} -> {width}x{height}", progress=0.1 + 0.4 * i / len(files)
        )
    ms_preview = int((time.monotonic() - t_preview) * 1000)

    t_vrt = time.monotonic()
    if len(files) > 1:
        source = mosaic_source(where, files)
        preview_source = build / "mosaic-preview.vrt"
        report.line(f"VRT: {len(files)} files -> {source.name}")
        write_atomic(preview_source, mosaic_vrt(previews, build))
        report.line(f"VRT preview: {len(previews)} previews -> {preview_source.name}")
    else:
        source, preview_source = files[0], previews[0]
        report.line("VRT: not needed (one file)")
    ms_vrt = int((time.monotonic() - t_vrt) * 1000)

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
    preview_resolution = PREVIEW_FACTOR / 2 * resolution
    preview_scale = preview_resolution / _METRES_PER_SCREEN_PX
    preview_zoom = math.floor(math.log2(_RES_Z0 / preview_resolution))
    scaling = (
        "source at every zoom (small raster)"
        if small
        else (f"preview up to zoom {preview_zoom} (scale 1:{preview_scale:.0f}), source above")
    )
    report.line(f"Raster scaling: {scaling}")
    ms_info = int((time.monotonic() - t_info) * 1000)

    t_xml = time.monotonic()
    spec = StyleSpec(
        name=where.rel_path,
        bounds=extent,
        zoom=zoom,
        srs=srs,
        source=source,
        preview=None if small else preview_source,
        preview_min_scale=preview_scale,
        nodata=nodata,
    )
    xml = style_xml(spec, where.xml_path.parent)
    times = f"preview {ms_preview}ms, vrt {ms_vrt}ms, info {ms_info}ms"
    result = {
        "id": where.name,
        "layer": where.raster_id,
        "extent": extent,
        "url": url,
    }
    return _Built(xml, times, t_xml, result)
