"""The jobs' messages: one typed model per kind of job (issue 34).

A message is what the API sends a worker: a Celery task's keyword arguments, as JSON, which the
job's record keeps as its ``params`` (``/jobs/{id}`` shows them). The API builds the message of
its kind (:class:`~shared.queues.JobKind` names it) and sends :meth:`JobMessage.params`; the
worker reads it back with :meth:`JobMessage.of`, which refuses a key the model does not have.
The use cases take the message as it is. A field added later has a default, so that a message
sent by the version before is still read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

__all__ = [
    "Export",
    "JobMessage",
    "Pretile",
    "Probe",
    "RasterCompress",
    "RasterConfig",
    "SpeedTest",
    "Sweep",
]


@dataclass(frozen=True)
class JobMessage:
    """The parameters of a job: a frozen dataclass of JSON values."""

    def params(self) -> dict[str, Any]:
        """The message as a task's keyword arguments (JSON)."""
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> Self:
        """The message sent as ``params`` (a task's keyword arguments, a record's ``params``).

        Raises:
            TypeError: a key the model does not have, or one it needs missing.
        """
        return cls(**params)


@dataclass(frozen=True)
class Probe(JobMessage):
    """The pipeline probe: ``steps`` lines ``delay_ms`` apart, failing at ``fail_at`` (0:
    never)."""

    steps: int
    delay_ms: int
    fail_at: int


@dataclass(frozen=True)
class RasterConfig(JobMessage):
    """The configuration of the raster at ``path`` (relative to the raster root) as a layer."""

    path: str
    lang: str
    #: where its tiles are served (the API's mount)
    url_prefix: str
    #: read the rasters again (``nocache=1``)
    refresh: bool
    #: the resampling's name (None: as configured last, else the raster's default)
    resampling: str | None = None
    #: TiTiler's rendering parameters as JSON (None: as configured last)
    rendering: dict[str, Any] | None = None


@dataclass(frozen=True)
class RasterCompress(JobMessage):
    """The compression of the rasters of the layer at ``path``."""

    path: str


@dataclass(frozen=True)
class Pretile(JobMessage):
    """A pre-tiling run of a raster layer (``style``) in a language, zooms end-excluded."""

    style: str
    lang: str
    minzoom: int
    maxzoom: int
    #: render every tile again (``nocache=1``)
    refresh: bool
    #: into the bucket (else the disk)
    s3: bool
    #: the tiles' format and scale (``png``, ``webp@2x``…: a :class:`TileVariant`'s name)
    variant: str = "png"
    #: the area tiled (``Coverage.to_json``; None: the layer's footprint)
    coverage: dict[str, Any] | None = None
    #: make again the tiles cached before this time (POSIX seconds)
    refresh_before: float | None = None
    #: the run's pace (None: as fast as the workers go)
    max_tiles_per_s: float | None = None
    #: the interrupted run this one continues
    resume_of: str | None = None


@dataclass(frozen=True)
class SpeedTest(JobMessage):
    """The tiling speed test of a raster layer (``style``) in a language."""

    style: str
    lang: str


@dataclass(frozen=True)
class Export(JobMessage):
    """An export of a layer's tiles: its tiles' format, a coverage and zooms (end excluded);
    without a coverage or an end zoom, the layer's bounds (grown by ``buffer``) and one past its
    own maxzoom (:func:`shared.seeding.export.export_area`)."""

    layer: str
    vector: bool
    #: ``mbtiles`` or ``pmtiles``
    archive: str
    tile_format: str
    #: the coverage, :meth:`Coverage.to_json` (None: the layer's bounds)
    coverage: dict[str, Any] | None
    minzoom: int
    maxzoom: int | None
    lang: str = ""
    #: where the file is downloaded from, for the result (the API's URL; none from the CLI)
    url: str = ""
    #: pixels around each tile when the coverage is the layer's bounds (a coverage has its own)
    buffer: int = 0
    #: write the archive to the bucket (and not keep it on the disk)
    s3: bool = False

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> Self:
        """The message; one sent before coverages existed names a ``bbox`` instead, read as a
        coverage."""
        if "bbox" in params:
            params = dict(params)
            bbox = params.pop("bbox")
            if params.get("coverage") is None and bbox is not None:
                params["coverage"] = {"bounds": list(bbox), "geometry": None, "buffer": 0}
        return cls(**params)


@dataclass(frozen=True)
class Sweep(JobMessage):
    """A truncation or expiry: a layer's cached tiles of a set removed (or drawn again).

    Attributes:
        layer: the raster layer (style) or vector layer (its table's id, not an alias).
        vector: whether it is a vector layer.
        tiles: the set of tiles (:meth:`TileSet.to_json`).
        minzoom: the first zoom.
        maxzoom: the end zoom (excluded).
        variants: the variants' names (``png``, ``webp@2x``, …); None: every one.
        langs: the languages; None: every one the cache holds.
        stores: ``file`` (the disk), ``s3`` (the bucket), or both.
        rerender: draw the tiles found again (raster layers; the rest removed) instead of
            removing them.
        front: the nginx front's vector tiles: ``folder``, ``patterns`` and the layer's
            ``names`` (its id and aliases: see
            :func:`~shared.vector.front_cache.drop_front_tiles`); None: not looked at.
        answers: a vector layer's other cached answers go too (GeoJSON pages, OGC items: its
            data changed).
    """

    layer: str
    vector: bool
    tiles: dict[str, Any]
    minzoom: int
    maxzoom: int
    variants: list[str] | None = None
    langs: list[str] | None = None
    stores: list[str] = field(default_factory=lambda: ["file"])
    rerender: bool = False
    front: dict[str, Any] | None = None
    answers: bool = False
