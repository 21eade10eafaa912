"""Export (issue 25): a layer's tiles for a coverage and zooms as one MBTiles or PMTiles file.

A raster layer's tiles are those ``rtile`` answers, byte for byte: taken from the tile cache
where they are, else rendered by the renderer pre-tiling uses and stored in the cache too, so
that an export leaves the cache as a pre-tiling run of the same tiles would (the cache holds a
layer's tiles until the layer is configured again, so what it holds is fresh). Empty tiles are
written as well, as ``rtile`` answers them; a PMTiles archive stores them once. A vector
layer's tiles are those of ``/vtile`` (the same statement, :func:`shared.vector.tiles.vector_tile`,
read from PostGIS rather than the API's cache), gzipped as MBTiles and PMTiles readers expect;
a tile without features is left out, as ``/vtile`` answers ``204``.

One process writes an export: the tiles that meet the coverage (a
:class:`~shared.seeding.coverage.Coverage`: a box in any CRS, polygons, a buffer, as pre-tiling
takes it; the layer's bounds by default), zoom by zoom, each zoom along the Hilbert curve of
PMTiles tile ids (so the archive is clustered), under a temporary name beside the final one,
renamed once complete (:func:`shared.base.files.atomic_path`): an export that fails, is
cancelled or whose process is killed never leaves a file under its final name. An export to
the bucket (``s3``) is then uploaded whole and the local file removed
(:mod:`shared.seeding.export_s3`). Pre-tile a large layer first to spread its rendering over
every worker process; the export then reads the cache.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import itertools
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from pmtiles.tile import zxy_to_tileid
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.base.encoding import Encoding, empty_tile
from shared.base.files import atomic_path
from shared.base.formats import TileFormat, TileVariant
from shared.base.grid import MAX_ZOOM, TileAddress
from shared.disk import short_of_space
from shared.errors import InvalidInputError, NotFoundError, UnavailableError, UnprocessableError
from shared.job_messages import Export
from shared.seeding.archives import ARCHIVES, ArchiveInfo, open_archive
from shared.seeding.coverage import Block, Coverage
from shared.seeding.export_s3 import ExportBucket
from shared.seeding.plan import plan_pretile
from shared.settings import Settings, TileSettings, VectorSettings
from shared.tiles.render import TileRenderer
from shared.tiles.store import TileStore, tile_key
from shared.tiles.styles import read_style
from shared.vector.catalog import Catalogue, VectorLayer
from shared.vector.db import make_engine
from shared.vector.query import LayerQuery
from shared.vector.tiles import vector_tile

__all__ = [
    "ARCHIVES",
    "RASTER_FORMATS",
    "Progress",
    "check_export_name",
    "no_export",
    "export_area",
    "export_file",
    "export_folder",
    "export_layer",
    "export_name",
    "export_within",
    "is_raster_layer",
    "plan_export",
    "tile_format_of",
    "tiles_in_order",
]

#: the tile formats of raster exports; vector exports are ``mvt``
RASTER_FORMATS = tuple(f.value for f in TileFormat)
_LAT_LIMIT = 85.0511287798066
#: an export's name: the id of the job that wrote it, and its format
_NAME = re.compile(rf"^[0-9a-f]{{8}}(-[0-9a-f]{{4}}){{3}}-[0-9a-f]{{12}}\.({'|'.join(ARCHIVES)})$")
#: exports kept per layer: a new export removes the oldest beyond these (disk is bounded)
KEEP_EXPORTS = 5
#: seconds after which a partial file (``.<name>.<random>.tmp``) is an export that died
_STALE_S = 24 * 3600
#: seconds between two progress lines (each one also sees a cancellation)
_PROGRESS_S = 1.0
#: vector tiles made at once (one database connection each)
_VECTOR_AT_ONCE = 4
#: gzip level of vector tiles: an archive is written once and read many times
_GZIP_LEVEL = 6


class Progress(Protocol):
    """Where an export reports (a job's :class:`~shared.jobs.JobReporter`, the CLI's printer)."""

    def line(self, text: str, *, progress: float | None = None) -> None:
        """Report a line; raises :class:`~shared.errors.JobCancelledError` when cancelled."""


def export_within(job: Export, bounds: list[float], own_maxzoom: int) -> Export:
    """``job`` with the layer's ``bounds`` and ``own_maxzoom`` where it names none."""
    maxzoom = job.maxzoom or min(own_maxzoom, MAX_ZOOM) + 1
    coverage = job.coverage or Coverage.box(bounds, job.buffer).to_json()
    return replace(job, coverage=coverage, maxzoom=maxzoom)


def export_area(job: Export) -> tuple[Coverage, int]:
    """The coverage and the end zoom of ``job`` (once :func:`export_within` gave the
    defaults)."""
    assert job.coverage is not None
    assert job.maxzoom is not None
    return Coverage.from_json(job.coverage), job.maxzoom


def tile_format_of(asked: str | None, vector: bool) -> str:
    """The tiles' format of an export: ``asked`` (``jpeg`` is ``jpg``), else the layer's
    default (``png``, or ``mvt`` for a vector layer).

    Raises:
        InvalidInputError: a format the layer's kind has not (``parameter``: ``tile_format``).
    """
    if vector:
        if asked not in (None, "mvt"):
            raise InvalidInputError(
                "a vector layer's tiles are mvt", parameter="tile_format", value=asked
            )
        return "mvt"
    if asked == "mvt":
        raise InvalidInputError(
            f"a raster layer's tiles are one of {', '.join(RASTER_FORMATS)}",
            parameter="tile_format",
            value=asked,
        )
    try:
        return TileFormat.from_extension(asked or "png").value
    except InvalidInputError as exc:
        raise InvalidInputError(exc.message, parameter="tile_format", value=asked) from None


def export_folder(exports: Path, layer: str) -> Path:
    """The folder of a layer's exports under ``exports``: named by a hash of the layer id, so
    that any id (``schema.table`` of any characters) is one safe folder name."""
    return exports / hashlib.sha256(layer.encode()).hexdigest()[:32]


def export_name(job_id: str, archive: str) -> str:
    """The file name of the export a job writes."""
    return f"{job_id}.{archive}"


def check_export_name(name: str) -> str:
    """``name``, when it is an export's name (a job id and an archive format).

    Raises:
        NotFoundError: it is not (``parameter``: ``name``).
    """
    if not _NAME.fullmatch(name):
        raise no_export(name)
    return name


def no_export(name: str) -> NotFoundError:
    """The error of a name that is no export of the layer."""
    return NotFoundError(f"no export {name[:80]!r} of this layer", parameter="name")


def export_file(exports: Path, layer: str, name: str) -> Path:
    """The export ``name`` of ``layer`` on the disk.

    Raises:
        NotFoundError: ``name`` is not an export's name, or no export of the layer has it (an
            export being written has another name until it is complete).
    """
    path = export_folder(exports, layer) / check_export_name(name)
    if not path.is_file():
        raise no_export(name)
    return path


def plan_export(coverage: Coverage, minzoom: int, maxzoom: int, max_tiles: int) -> dict[str, Any]:
    """The tiles per zoom of an export of ``coverage``: pre-tiling's plan, every zoom whole,
    at most ``max_tiles`` tiles in all.

    Raises:
        InvalidInputError: the zooms are bad.
        UnprocessableError: the export is above ``max_tiles``, or a zoom of it is too long to
            count (a box thin and wide, a polygon of many vertices); its detail holds the plan.
    """
    plan = plan_pretile(coverage, minzoom, maxzoom, cap=max_tiles, ceiling=max_tiles)
    if not (plan["cut"] or plan["over_ceiling"]):
        return plan
    counts = [entry["tiles"] for entry in plan["zooms"]]
    counted = sum(count for count in counts if count is not None)
    if counted > max_tiles:
        least = "" if None not in counts else "at least "
        raise UnprocessableError(
            f"the export is {least}{counted} tiles, above the cap of {max_tiles} tiles: choose a"
            " lower maxzoom or a smaller coverage (each zoom has four times the tiles of the one"
            " before)",
            plan=plan,
        )
    raise UnprocessableError(
        "the export's zooms cannot all be planned: choose a lower maxzoom or a smaller coverage",
        plan=plan,
    )


def tiles_in_order(z: int, coverage: Coverage) -> Iterator[TileAddress]:
    """The tiles of zoom ``z`` that meet ``coverage``, in PMTiles tile id order.

    The coverage gives them by blocks of up to 8 x 8 tiles (the tiles under one tile of a
    lower zoom, found walking the pyramid from its top); the tiles under one tile are one stretch
    of the Hilbert curve, so the blocks are put in the order of those tiles' ids, and each
    block's tiles in theirs: no list of a zoom's tiles is held, only of its blocks.
    """
    level = max(0, z - 3)
    span = 1 << (z - level)

    def block_id(block: Block) -> int:
        return zxy_to_tileid(level, block.x0 // span, block.y0 // span)

    for block in sorted(coverage.blocks(z, span), key=block_id):
        width = block.x1 - block.x0 + 1
        tiles = [
            TileAddress(z, x, y)
            for y in range(block.y0, block.y1 + 1)
            for x in range(block.x0, block.x1 + 1)
            if block.mask is None or block.mask >> ((y - block.y0) * width + x - block.x0) & 1
        ]
        yield from sorted(tiles, key=lambda t: zxy_to_tileid(t.z, t.x, t.y))


class _Tiles(Protocol):
    """The tiles of an export, a batch at a time; ``b""`` for a tile left out."""

    counts: dict[str, int]
    batch: int

    def get(self, tiles: list[TileAddress]) -> list[bytes]:
        """The tiles' bytes, in order."""


#: tiles from the cache, rendered (``empty``: of those, with nothing drawn), outside the layer
_RASTER_COUNTS = ("cached", "rendered", "empty", "outside")


@dataclass
class _RasterTiles:
    """A raster layer's tiles as ``rtile`` answers them: cached, else rendered and cached."""

    renderer: TileRenderer
    store: TileStore
    style: str
    lang: str
    tile_format: TileFormat
    encoding: Encoding
    bounds: list[float] | None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_RASTER_COUNTS, 0))
    batch: int = 64

    def get(self, tiles: list[TileAddress]) -> list[bytes]:
        """The tiles' bytes, in order."""
        return [self._tile(tile) for tile in tiles]

    def _tile(self, tile: TileAddress) -> bytes:
        if self.bounds is not None and not tile.intersects(self.bounds):
            self.counts["outside"] += 1  # empty, as the tile service answers it, not stored
            return empty_tile(self.tile_format, self.renderer.tile_size)
        key = tile_key(self.style, self.lang, tile, TileVariant(self.tile_format))
        cached = self.store.get(key)
        if cached is not None:
            self.counts["cached"] += 1
            return cached
        codec = self.encoding.codec(self.tile_format)
        rendered = self.renderer.render_tile(self.style, self.lang, tile, codec)
        self.store.put(key, rendered.data)
        self.counts["rendered"] += 1
        self.counts["empty"] += rendered.empty
        return rendered.data


@dataclass
class _VectorTiles:
    """A vector layer's tiles as ``/vtile`` makes them, gzipped; ``b""`` without features."""

    runner: asyncio.Runner
    engine: AsyncEngine
    layer: VectorLayer
    settings: VectorSettings
    counts: dict[str, int] = field(default_factory=lambda: {"made": 0, "without_features": 0})
    batch: int = _VECTOR_AT_ONCE

    def get(self, tiles: list[TileAddress]) -> list[bytes]:
        """The tiles' bytes, in order, made a few at a time."""
        datas = self.runner.run(self._get(tiles))
        for data in datas:
            self.counts["made" if data else "without_features"] += 1
        return [gzip.compress(data, _GZIP_LEVEL, mtime=0) if data else b"" for data in datas]

    async def _get(self, tiles: list[TileAddress]) -> list[bytes]:
        made = (
            vector_tile(
                self.engine,
                self.layer,
                LayerQuery(),
                tile,
                max_features=self.settings.vtile_max_features,
                timeout_ms=self.settings.statement_timeout_ms,
                simplify_px=self.layer.simplify_px(self.settings.vtile_simplify_px),
            )
            for tile in tiles
        )
        return list(await asyncio.gather(*made))


def _field_type(sql_type: str) -> str:
    """A field's type as MBTiles' ``vector_layers`` names it."""
    if sql_type in ("boolean", "bool"):
        return "Boolean"
    if re.match(r"(small|big)?int|integer|numeric|real|double|float|decimal", sql_type):
        return "Number"
    return "String"


def _info(job: Export, name: str, tile_format: str, layer: VectorLayer | None) -> ArchiveInfo:
    """The archive's metadata: name, format, bounds (the coverage's), center, zooms, and its
    vector layer."""
    coverage, end = export_area(job)
    w, s, e, n = coverage.bounds
    s, n = max(s, -_LAT_LIMIT), min(n, _LAT_LIMIT)
    maxzoom = end - 1
    info: ArchiveInfo = {
        "name": name,
        "format": tile_format,
        "type": "overlay",
        "bounds": [w, s, e, n],
        "center": [round((w + e) / 2, 7), round((s + n) / 2, 7), job.minzoom],
        "minzoom": job.minzoom,
        "maxzoom": maxzoom,
    }
    if layer is not None:
        fields = {f: _field_type(t) for f, t in layer.fields.items()}
        info["vector_layers"] = [
            {"id": layer.id, "fields": fields, "minzoom": job.minzoom, "maxzoom": maxzoom}
        ]
    return info


def _holding(info: ArchiveInfo, first: int, last: int) -> ArchiveInfo:
    """``info`` stating the zooms the archive holds, ``first`` to ``last`` (MBTiles and
    PMTiles name the last one): its zooms, its center's, its vector layer's."""
    held: ArchiveInfo = {**info, "minzoom": first, "maxzoom": last}
    held["center"] = [*info["center"][:2], first]
    if "vector_layers" in info:
        held["vector_layers"] = [
            {**layer, "minzoom": first, "maxzoom": last} for layer in info["vector_layers"]
        ]
    return held


@dataclass
class _Pace:
    """Progress lines at most every :data:`_PROGRESS_S`: done/total, the rate."""

    progress: Progress
    total: int
    started: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)
    done: int = 0

    def add(self, z: int, tiles: int, zoom_done: int, zoom_total: int) -> None:
        self.done += tiles
        now = time.monotonic()
        if now - self.last < _PROGRESS_S and zoom_done < zoom_total:
            return
        self.last = now
        rate = self.done / max(now - self.started, 1e-6)
        self.progress.line(
            f"Zoom {z}: {zoom_done}/{zoom_total} tiles; {self.done}/{self.total} in all,"
            f" {rate:.1f} tiles/s",
            progress=self.done / self.total if self.total else 1.0,
        )


def _batches(tiles: Iterator[TileAddress], size: int) -> Iterator[list[TileAddress]]:
    while batch := list(itertools.islice(tiles, size)):
        yield batch


def _prune(folder: Path) -> None:
    """Make room for one more export of a layer: its oldest exports beyond
    :data:`KEEP_EXPORTS` and the partial files of exports that died are removed."""
    if not folder.is_dir():
        return
    done = sorted(
        (p for p in folder.iterdir() if _NAME.fullmatch(p.name)), key=lambda p: p.stat().st_mtime
    )
    stale = [p for p in folder.glob(".*.tmp") if time.time() - p.stat().st_mtime > _STALE_S]
    for old in [*done[: max(0, len(done) - KEEP_EXPORTS + 1)], *stale]:
        old.unlink(missing_ok=True)


def _write(
    job: Export,
    source: _Tiles,
    info: ArchiveInfo,
    path: Path,
    progress: Progress,
    limits: TileSettings,
) -> dict[str, Any]:
    """Write the export to ``path`` (renamed there once complete): its summary. It stops
    (nothing left) past ``limits``' tiles, past its bytes, or before the disk fills up."""
    coverage, maxzoom = export_area(job)
    plan = plan_export(coverage, job.minzoom, maxzoom, limits.pretile_max_tiles)
    title = f"{job.layer}: zooms {job.minzoom}-{maxzoom - 1}, {plan['total']} tiles"
    progress.line(f"Export {title} as {job.tile_format} into {job.archive}")
    pace = _Pace(progress, plan["total"])
    written = size = 0
    held: set[int] = set()  # the zooms of the tiles written
    _prune(path.parent)
    _check_room(path, limits, size)
    with atomic_path(path) as tmp:
        archive = open_archive(tmp, job.archive, job.tile_format)
        try:
            for entry in plan["zooms"]:
                z, zoom_done = entry["zoom"], 0
                for batch in _batches(tiles_in_order(z, coverage), source.batch):
                    for tile, data in zip(batch, source.get(batch), strict=True):
                        if data:
                            archive.add(tile, data)
                            held.add(z)
                            written += 1
                            size += len(data)
                    _check_room(path, limits, size)
                    zoom_done += len(batch)
                    pace.add(z, len(batch), zoom_done, entry["tiles"])
            if not written:
                raise UnprocessableError(
                    f"no tile of layer {job.layer} has data in the coverage and zooms",
                    bounds=list(coverage.bounds),
                )
            info = _holding(info, min(held), max(held))
            archive.close(info)
        except BaseException:
            archive.abort()
            raise
    size = path.stat().st_size
    progress.line(f"Done: {written} tiles, {size} bytes in {path.name}")
    return {
        "layer": job.layer,
        "archive": job.archive,
        "tile_format": job.tile_format,
        "file": path.name,
        "url": job.url or None,
        "bytes": size,
        "tiles": written,
        **source.counts,
        "minzoom": min(held),
        "maxzoom": max(held) + 1,
        "zooms": sorted(held),
        "bounds": info["bounds"],
        "plan": plan,
    }


def _check_room(path: Path, limits: TileSettings, size: int) -> None:
    """Stop an export that has written ``size`` bytes of tiles past its cap, or whose disk has
    less free than it keeps.

    Raises:
        UnprocessableError: past ``MAPSVC_EXPORT_MAX_BYTES``.
        UnavailableError: the disk is almost full.
    """
    if size > limits.export_max_bytes:
        raise UnprocessableError(
            f"the export stopped: its tiles passed {limits.export_max_bytes} bytes"
            " (MAPSVC_EXPORT_MAX_BYTES); export fewer zooms or a smaller coverage",
            bytes=size,
        )
    short = short_of_space(path.parent, limits.min_free_disk_bytes)
    if short is not None:
        raise UnavailableError(f"the export stopped: {short}")


def export_layer(
    settings: Settings,
    job: Export,
    path: Path,
    progress: Progress,
    *,
    renderer: TileRenderer,
    store: TileStore,
    bucket: ExportBucket | None = None,
) -> dict[str, Any]:
    """Export ``job`` to ``path`` (written aside, renamed once complete): the summary.

    Args:
        settings: the settings (the tile cap, encodings, the database of vector layers).
        job: what to export.
        path: the file to write.
        progress: where the progress lines go (they see a cancellation).
        renderer: renders the raster tiles the cache lacks.
        store: the tile cache read (and filled) for raster tiles.
        bucket: where an export with ``s3`` goes (``path`` is then removed once uploaded).

    Raises:
        NotFoundError: no such layer.
        InvalidInputError: bad zooms or tile format.
        UnprocessableError: above the tile cap, or no tile with data.
        UnavailableError: ``s3`` without a bucket, or the upload failed (nothing is stored).
        JobCancelledError: cancelled (nothing is left under ``path``).
    """
    if job.s3 and bucket is None:
        raise UnavailableError("object storage is not configured (MAPSVC_S3_* settings)")
    summary = _export(settings, job, path, progress, renderer, store)
    if bucket is None or not job.s3:
        return summary
    progress.line(f"Upload: {summary['bytes']} bytes to the bucket {bucket.bucket}")
    try:
        key = bucket.upload(path, job.layer, path.name, KEEP_EXPORTS)
    finally:
        path.unlink(missing_ok=True)
    progress.line(f"Stored: s3://{bucket.bucket}/{key}")
    return {**summary, "s3": {"bucket": bucket.bucket, "key": key}}


def _export(
    settings: Settings,
    job: Export,
    path: Path,
    progress: Progress,
    renderer: TileRenderer,
    store: TileStore,
) -> dict[str, Any]:
    """Write the export to ``path`` (:func:`export_layer`)."""
    job = replace(job, tile_format=tile_format_of(job.tile_format, job.vector))
    if not job.vector:
        style = read_style(renderer.mapnik_dir, job.layer)
        job = export_within(job, style.footprint, style.maxzoom)
        tile_format = TileFormat.from_extension(job.tile_format)
        raster = _RasterTiles(
            renderer,
            store,
            job.layer,
            job.lang,
            tile_format,
            Encoding.from_settings(settings.tiles),
            style.bounds,
        )
        info = _info(job, style.title, tile_format.value, None)
        return _write(job, raster, info, path, progress, settings.tiles)
    with asyncio.Runner() as runner:
        engine = make_engine(settings, connections=_VECTOR_AT_ONCE)
        try:
            vector = settings.vector
            catalogue = Catalogue(list(vector.schemas), vector.config, vector.catalog_ttl_s)
            layer = runner.run(catalogue.layer(engine, job.layer))
            job = export_within(job, layer.bounds, layer.maxzoom)
            tiles = _VectorTiles(runner, engine, layer, vector)
            info = _info(job, layer.id, "pbf", layer)
            return _write(job, tiles, info, path, progress, settings.tiles)
        finally:
            runner.run(engine.dispose())


def is_raster_layer(mapnik_dir: Path, layer: str) -> bool:
    """Whether ``layer`` names a raster layer (else it may name a vector layer)."""
    try:
        read_style(mapnik_dir, layer)
    except (InvalidInputError, NotFoundError):
        return False
    return True
