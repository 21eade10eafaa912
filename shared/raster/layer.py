"""Raster layers: where their files live, and their configuration (spec 4.4, section 6).

Configuring a layer checks its files, makes a preview (one tenth of the resolution, with
overviews) of each, a mosaic VRT (and a VRT of the previews) when the layer is a folder of
several files, reads location and CRS, and writes the Mapnik XML to
``<workDir>/map/mapnik/<raster id>.xml``. Derived files go to ``<workDir>/map/derived/<id>/``,
so the user's raster folders stay as they are. Every stage is a line on the job's stream.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Sequence
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
from shared.raster.paths import encode_id, raster_root, resolve
from shared.raster.stat import describe_file
from shared.raster.style import WEB_MERCATOR, StyleSpec, style_xml
from shared.raster.vrt import mosaic_vrt
from shared.tiles.store import FileTileStore, TileStore

__all__ = ["LayerLocation", "configure_layer", "locate_layer", "mosaic_source", "tile_url"]

PREVIEW_FACTOR = 10
#: Rasters whose sides are all at most this many pixels are drawn from their source at every
#: zoom: their preview would be smaller than a tile.
SMALL_RASTER_PX = 2560
_RES_Z0 = 2 * math.pi * 6378137 / 256  # metres per pixel of Web Mercator zoom 0
_METRES_PER_SCREEN_PX = 0.00028  # Mapnik's scale denominator = resolution / this
_MANIFEST = "manifest.json"


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

    Raises:
        InvalidInputError: the path leads outside the raster root.
        NotFoundError: nothing at the path.
    """
    rel = rel_path.strip("/")
    source = resolve(raster_root(work_dir), rel)
    raster_id = encode_id(rel)
    return LayerLocation(
        rel_path=rel,
        raster_id=raster_id,
        name=source.name,
        source=source,
        derived_dir=work_dir / "map" / "derived" / raster_id,
        xml_path=work_dir / "map" / "mapnik" / f"{raster_id}.xml",
        tile_dir=work_dir / "map" / "rtile" / raster_id,
    )


def tile_url(raster_id: str, lang: str) -> str:
    """The tile URL template of a layer (spec 2.2)."""
    return f"/api-user/rtile/{raster_id}/{lang}/{{z}}/{{x}}/{{y}}.png"


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
    refresh: bool,
    stores: Sequence[TileStore] | None = None,
) -> dict[str, Any]:
    """Build (or reuse) the configuration of a raster layer, reporting each stage.

    Args:
        work_dir: the service's work dir.
        rel_path: the raster file or folder, relative to ``<workDir>/map/raster``.
        report: the job's reporter.
        lang: the language put into the tile URL.
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
    manifest_path = where.derived_dir / _MANIFEST
    reuse = (
        not refresh
        and manifest_path.is_file()
        and json.loads(manifest_path.read_text()) == json.loads(json.dumps(manifest))
    )
    if not reuse and where.derived_dir.exists():
        shutil.rmtree(where.derived_dir)
    where.derived_dir.mkdir(parents=True, exist_ok=True)

    t_preview = time.monotonic()
    report.line(f"Start compression: {len(files)} file(s), previews 1/{PREVIEW_FACTOR}")
    previews = []
    for i, path in enumerate(files, start=1):
        preview = where.derived_dir / f"preview-{i:04d}-{path.stem}.tif"
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
        preview_source = where.derived_dir / "mosaic-preview.vrt"
        report.line(f"VRT: {len(files)} files -> {source.name}")
        write_atomic(preview_source, mosaic_vrt(previews, where.derived_dir))
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
    changed = not where.xml_path.is_file() or where.xml_path.read_text() != xml
    size = write_atomic(where.xml_path, xml)
    report.line(f"XML size: {size} bytes")
    if changed or not reuse:
        # a new configuration must never be served from tiles of the old one
        if stores is None:
            stores = [FileTileStore(work_dir / "map" / "rtile")]
        try:
            for store in stores:
                store.drop_style(where.raster_id)
        except BaseException:
            # without the manifest the next run rebuilds, and so drops the tiles again
            manifest_path.unlink(missing_ok=True)
            raise
    write_atomic(manifest_path, json.dumps(manifest))
    report.line(f"XML file: map/mapnik/{where.xml_path.name}")
    ms_xml = int((time.monotonic() - t_xml) * 1000)
    report.line(f"Total time: {int((time.monotonic() - t0) * 1000)}")
    report.line(f"Times: preview {ms_preview}ms, vrt {ms_vrt}ms, info {ms_info}ms, xml {ms_xml}ms")
    return {
        "id": where.name,
        "layer": where.raster_id,
        "extent": extent,
        "url": tile_url(where.raster_id, lang),
    }
