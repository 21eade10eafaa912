"""The response bodies of the OpenAPI document as pydantic models, and their JSON schemas.

Every failure is :class:`ErrorResponse`; :func:`components` gives the schemas of
``components.schemas`` and :func:`ref` points at one of them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import JsonSchemaMode, models_json_schema

__all__ = [
    "Answer",
    "CacheDropped",
    "CatalogueEntry",
    "CompressResult",
    "CompressedFile",
    "ElevationLocation",
    "ElevationResult",
    "Elevations",
    "ErrorBody",
    "ErrorResponse",
    "ExportResult",
    "Feature",
    "FeatureCollection",
    "FrontDoor",
    "FrontLink",
    "Health",
    "Job",
    "JobLinks",
    "JobList",
    "Parcel",
    "PretilePlan",
    "PretileResult",
    "PretileZoom",
    "Places",
    "ProbeResult",
    "RasterConfig",
    "RasterInfo",
    "RasterListing",
    "RasterRow",
    "RasterStat",
    "RasterStatTimes",
    "RasterTileJson",
    "Ready",
    "ReverseGeocode",
    "Schema",
    "SpeedTest",
    "SseEvent",
    "SweepPlan",
    "SweepResult",
    "SweepZoom",
    "TileDebug",
    "TileJson",
    "VectorCatalogue",
    "VectorLayerEntry",
    "Weather",
    "components",
    "ref",
    "referenced_model",
]

Schema = dict[str, Any]


class Answer(BaseModel):
    """An answer's model: a field it does not declare is refused (``MAPSVC_CHECK_ANSWERS``
    checks every answer against its model, so the document cannot drift from what is sent)."""

    model_config = ConfigDict(extra="forbid")


class ErrorBody(Answer):
    """What went wrong: a stable slug, a message for people, and facts about the failure."""

    code: str
    message: str
    detail: dict[str, Any]


class ErrorResponse(Answer):
    """The one shape of every failure (4xx and 5xx)."""

    error: ErrorBody


class JobLinks(Answer):
    """Where the job and its event stream are."""

    self: str
    events: str


class Job(Answer):
    """The job descriptor: state, progress, result or error, links."""

    id: str
    kind: str
    state: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    layer: str | None
    request_id: str | None
    progress: float | None
    params: dict[str, Any]
    created: str | None
    started: str | None
    finished: str | None
    worker: str | None
    last_line: str | None
    cancel_requested: bool
    result: Any
    error: dict[str, Any] | None
    links: JobLinks


class JobList(Answer):
    """One page of the jobs collection."""

    jobs: list[Job]
    limit: int
    offset: int
    next: str | None


class SseEvent(Answer):
    """One event of a stream: its text (a job line) and its stream entry id."""

    data: str
    id: str | None = None


class FrontLink(Answer):
    """A link of the front door."""

    rel: str
    href: str
    type: str
    title: str


class FrontDoor(Answer):
    """The front door: the service, its version, links to its pages and documents."""

    service: Literal["mapsvc"]
    version: str
    links: list[FrontLink]


class Health(Answer):
    """The process is alive, and its version (``pyproject.toml``'s)."""

    status: Literal["ok"]
    version: str


class Ready(Answer):
    """Every dependency answered (the checks themselves are shown to operators only)."""

    status: Literal["ready"]
    checks: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Each dependency's check; operators only"
    )


class RasterRow(Answer):
    """A raster of a listing (spec 2.1)."""

    id: str
    name: str
    islayer: bool
    filename: str
    path: str
    type: Literal["dir", "file"]


class RasterListing(Answer):
    """The rasters of a folder (spec 2.1)."""

    time: int
    folder: str
    rows: list[RasterRow]


class RasterConfig(Answer):
    """A raster configured as a layer (spec 2.2), with the layer id added."""

    id: str
    layer: str
    extent: list[float]
    url: str = Field(description="The PNG tile URL template (spec 2.2)")
    urls: dict[str, str] = Field(
        description="The tile URL template of every format and scale, by name: png, webp, "
        "jpg, png@2x, webp@2x, jpg@2x"
    )
    tilejson: str = Field(description="The layer's TileJSON URL, in the language of `url`")
    statistics: list[BandStatistics] = Field(description="The statistics of each band")
    rendering: RasterRendering | None = Field(
        description="How the layer is drawn (its choice over its default); null: as 8-bit"
        " imagery, by Mapnik"
    )


class RasterStatTimes(Answer):
    """Times, size and count of a raster (spec 2.3 ``stat``)."""

    cdate: str
    edate: str
    size: int | None
    count: int


class RasterStat(Answer):
    """Raster statistics (spec 2.3)."""

    time: int
    type: Literal["file", "dir"]
    stat: RasterStatTimes
    files: list[dict[str, Any]]


class RasterInfo(Answer):
    """``gdalinfo -json`` of a layer's raster (spec 2.4): the fields below, and every other
    field gdalinfo prints for that raster (its own document, open)."""

    model_config = ConfigDict(extra="allow")

    description: str
    driverShortName: str  # noqa: N815 - gdalinfo's field name
    size: list[int]
    bands: list[dict[str, Any]]


class CompressedFile(Answer):
    """One compressed raster."""

    name: str
    size: int = Field(description="Its bytes before")
    compressed: int | None = Field(description="Its bytes after (null: it failed)")
    ratio: float | None = Field(description="After over before")
    ms: int
    err: str | None = Field(description="Why it failed (empty: it did not)")


class CompressResult(Answer):
    """Where the compressed rasters went."""

    folder: str
    files: list[CompressedFile]


class TileDebug(Answer):
    """The tile's corners in the layer's CRS and the command that renders it (spec 2.6)."""

    bbound: list[float]
    cmd: str


class PretileZoom(Answer):
    """One zoom of a pre-tiling plan."""

    zoom: int
    tiles: int | None = Field(description="Tiles meeting the coverage; null: too many to count")
    tiled: bool = Field(description="Whether the zoom is tiled (false: cut by the cap)")


class PretilePlan(Answer):
    """What pre-tiling would render (``dryrun=1``)."""

    minzoom: int
    maxzoom: int = Field(description="End zoom, excluded")
    cap: int = Field(description="The most tiles one run makes")
    zooms: list[PretileZoom]
    total: int
    cut: list[int] = Field(description="The zooms cut by the cap")
    ceiling: int | None = Field(description="`MAPSVC_PRETILE_MAX_TILES`")
    over_ceiling: bool = Field(description="Whether the plan is over it (refused: `422`)")


class PretileResult(Answer):
    """What a pre-tiling job rendered."""

    plan: dict[str, Any]
    zooms: list[dict[str, Any]]
    rendered: int
    skipped: int
    empty: int = Field(description="Rendered tiles with nothing drawn")
    seconds: float
    first_error: str | None = Field(None, description="The first error of a failed chunk")
    resumed_of: str | None = Field(None, description="The run this one resumed")
    workers: dict[str, dict[str, int]] = Field(
        description="Per worker (its Celery name): the chunks it did and the tiles it rendered"
    )
    failed: int = Field(0, description="Tiles of chunks given up after their retries")
    failed_tiles: list[str] = Field(
        [], description="Those tiles as `z/x/y` lines (osm2pgsql's expiry format)"
    )
    resumed: int = Field(0, description="Tiles done by the run this one resumed")
    tiles_per_s: float = Field(0.0, description="This run's tiles (made or found) per second")


class SeedZoom(Answer):
    """A run's progress at one zoom."""

    zoom: int
    tiles: int | None
    done: int
    failed: int


class Seed(Job):
    """A pre-tiling run: its job, and its progress in tiles (null until it is planned)."""

    total: int | None
    done: int | None = None
    remaining: int | None = None
    failed: int | None = None
    tiles_per_s: float | None = None
    eta_s: int | None = Field(None, description="Seconds left at its rate (running runs)")
    resumed_of: str | None = None
    zooms: list[SeedZoom] = []
    coverage: dict[str, Any] | None = Field(
        description="What it tiles: a GeoJSON Feature of EPSG:4326"
    )


class SeedList(Answer):
    """One page of the seeds collection."""

    seeds: list[Seed]
    limit: int
    offset: int


class SeedsCancelled(Answer):
    """The runs of a layer cancelled."""

    layer: str
    cancelled: list[str]


class ExportResult(Answer):
    """What an export job wrote: its file, where to download it, and its tiles."""

    layer: str
    archive: str = Field(description="`mbtiles` or `pmtiles`")
    tile_format: str = Field(description="`png`, `webp`, `jpg` or `mvt`")
    file: str = Field(description="The file's name")
    url: str | None = Field(description="Where to download it (HTTP range requests served)")
    s3: dict[str, str] | None = Field(
        None, description="`isS3=1`: the `bucket` and `key` of the file (not kept on the disk)"
    )
    bytes: int
    tiles: int = Field(description="Tiles written")
    minzoom: int = Field(description="The first zoom it holds tiles of")
    maxzoom: int = Field(
        description="End zoom, excluded: one past the last zoom it holds tiles of (the"
        " archive's own metadata names the last, as MBTiles and PMTiles do)"
    )
    zooms: list[int] = Field(description="The zooms it holds tiles of")
    bounds: list[float]
    plan: dict[str, Any]
    cached: int | None = Field(None, description="Raster tiles taken from the tile cache")
    rendered: int | None = Field(None, description="Raster tiles rendered (and cached)")
    empty: int | None = Field(None, description="Raster tiles with nothing drawn")
    outside: int | None = Field(None, description="Raster tiles outside the layer's footprint")
    made: int | None = Field(None, description="Vector tiles made, with features")
    without_features: int | None = Field(
        None, description="Vector tiles without features (left out of the file)"
    )


class SweepZoom(Answer):
    """One zoom of a truncation or expiry plan."""

    zoom: int
    tiles: int | None = Field(description="Tiles of the set at the zoom; null: too many to count")


class SweepPlan(Answer):
    """The tiles a truncation or expiry may find cached (``dryrun=1``), per zoom."""

    minzoom: int
    maxzoom: int = Field(description="End zoom, excluded")
    zooms: list[SweepZoom]
    total: int = Field(description="The tiles of the zooms counted")


class SweepResult(Answer):
    """What a truncation or expiry job removed (or drew again)."""

    layer: str
    mode: str = Field(description="`remove`, or `rerender`")
    minzoom: int
    maxzoom: int = Field(description="End zoom, excluded")
    zooms: list[dict[str, Any]] = Field(description="Per zoom: `removed` and `rerendered` tiles")
    removed: int = Field(description="Cached tiles removed (each language and variant counts)")
    rerendered: int = Field(description="Cached tiles drawn again (`mode=rerender`)")
    seconds: float
    stores: list[str] | None = Field(None, description="A raster layer's: `file`, `s3`")
    langs: list[str] | None = Field(None, description="A raster layer's languages swept")
    formats: list[str] | None = Field(None, description="A raster layer's variants swept")
    vector_cache: int | None = Field(None, description="A vector layer's: the API's tiles gone")
    front_cache: int | None = Field(
        None, description="A vector layer's: the front's tiles gone (null: no front)"
    )


class SpeedTest(Answer):
    """The speed test's summary."""

    style: str
    lang: str
    sample_per_zoom: int = Field(description="Tiles sampled at each zoom")
    zooms: list[dict[str, Any]]


class ProbeResult(Answer):
    """The pipeline probe's result."""

    steps: int
    ms: int


class FeatureCollection(Answer):
    """A GeoJSON FeatureCollection, with the members a route adds (RFC 7946 6.1's foreign
    members: `links`, `numberMatched`, …, said by the route's description)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["FeatureCollection"]
    features: list[dict[str, Any]]


class Places(Answer):
    """Places by name: a GeoJSON FeatureCollection, with what was asked and whose data it is."""

    type: Literal["FeatureCollection"]
    query: dict[str, Any] = Field(description="`q`, `lang`, `limit` and `bbox` as read")
    features: list[dict[str, Any]]
    attribution: str | None = Field(description="The provider's attribution")


class Feature(Answer):
    """A GeoJSON Feature, with the members a route adds (its `id`, `links`: RFC 7946 6.1)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["Feature"]
    geometry: dict[str, Any] | None
    properties: dict[str, Any] | None


class VectorLayerEntry(Answer):
    """A layer of a TileJSON document (spec 2.5)."""

    id: str
    fields: dict[str, str]
    minzoom: int
    maxzoom: int
    count: int


class CatalogueEntry(Answer):
    """A vector layer in the catalogue."""

    id: str
    geometry_type: str = Field(description="As PostGIS names it: POINT, MULTIPOLYGON, …")
    count: int = Field(description="Features (estimated above 100000 rows)")
    bounds: list[float] = Field(description="west, south, east, north in degrees")
    minzoom: int
    maxzoom: int
    tilejson: str = Field(description="URL of the layer's TileJSON (gis-datasource/<id>)")


class VectorCatalogue(Answer):
    """The vector layers a caller may read."""

    layers: list[CatalogueEntry]


class _TileJson(Answer):
    """What the TileJSON 3.0.0 of a layer holds, raster or vector."""

    tilejson: str
    id: str
    name: str
    bounds: list[float] = Field(description="[west, south, east, north] in EPSG:4326")
    center: list[float]
    minzoom: int
    maxzoom: int
    scheme: str
    tiles: list[str] = Field(
        description="The absolute URL template of the tiles, carrying the parameters that shape"
        " them and the caller's `api_key` when the TileJSON was asked with one"
    )


class TileJson(_TileJson):
    """A vector layer as TileJSON 3.0.0 (spec 2.5)."""

    format: str
    vector_layers: list[VectorLayerEntry]
    watched: bool = Field(
        description="Its edits expire its tiles at once (docs/watch.md): follow "
        "`/watches/{layer}/events` to draw it again"
    )


class BandStatistics(Answer):
    """The statistics of one band of a raster layer, computed at configuration from a reduced
    read (about 1024² pixels, through the overviews); nodata, NaN, masks and alpha left out."""

    band: int
    dtype: str
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    median: float | None
    percentile_2: float | None
    percentile_98: float | None
    valid_percent: float


class RasterRendering(Answer):
    """How a raster layer is drawn, in TiTiler's parameters (canonical); every field optional."""

    bidx: list[str] | None = None
    expression: str | None = None
    rescale: list[str] | None = Field(None, description="`min,max` per band")
    colormap_name: str | None = None
    colormap: dict[str, list[int]] | list[Any] | None = None
    algorithm: str | None = None
    algorithm_params: dict[str, float] | None = None
    nodata: str | None = None
    resampling: str | None = None


class LegendEntry(Answer):
    """A colour of a legend, and the value (or ``[min, max]``) it stands for."""

    value: float | list[float] | None
    color: str = Field(description="`#rrggbbaa`")


class Legend(Answer):
    """The legend of a raster layer's drawing."""

    rendering: RasterRendering
    kind: Literal["gradient", "classes", "intervals", "rgb", "gray"]
    min: float | None = Field(description="A gradient's first value (null when not known)")
    max: float | None = Field(description="A gradient's last value")
    entries: list[LegendEntry]


class PointValues(Answer):
    """A raster layer's values at a point (TiTiler's ``/point``)."""

    coordinates: list[float] = Field(description="[lon, lat]")
    values: list[float | None] = Field(description="One per band or expression block")
    band_names: list[str]


class RasterTileJson(_TileJson):
    """A raster layer as TileJSON 3.0.0: its tiles in one language, format and scale;
    ``center`` is ``[lon, lat, zoom]``, ``maxzoom`` the layer's own zoom."""

    rendering: RasterRendering | None = Field(
        description="How the tiles are drawn: the rendering parameters asked, else the layer's"
        " own; null: as 8-bit imagery (Mapnik)"
    )
    statistics: list[BandStatistics] = Field(description="The statistics of the layer's bands")


class WatchedLayer(Answer):
    """A watched vector layer (issue 35)."""

    layer: str = Field(description="Its id, `schema.table`")
    geometry_column: str = Field(description="The column whose changes are followed")
    since: str = Field(description="When it was first watched (ISO 8601)")


class Follower(Answer):
    """The follower of the watched layers."""

    running: str | None = Field(description="The follower running (host and pid), or null")
    position: int = Field(description="The last change of the log it expired")


class WatchList(Answer):
    """The watched layers, and the follower."""

    layers: list[WatchedLayer]
    follower: Follower


class CacheDropped(Answer):
    """A layer's vector caches were dropped."""

    layer: str
    epoch: int


class ReverseGeocode(Answer):
    """Both providers' answers (spec 2.7); a failed key holds an error object instead."""

    geocoder_a: dict[str, Any]
    map: dict[str, Any]


class Weather(Answer):
    """The current weather (spec 2.8)."""

    body: dict[str, Any]


class ElevationLocation(Answer):
    """A point of an elevation result."""

    lat: float
    lng: float


class ElevationResult(Answer):
    """The elevation of one point; null where no data covers it."""

    dataset: str
    elevation: float | None
    location: ElevationLocation


class Elevations(Answer):
    """Elevations of points (spec 2.9)."""

    results: list[ElevationResult]
    status: str


class Parcel(Answer):
    """A land parcel (spec 2.10)."""

    success: bool
    result: dict[str, Any]


#: every model a reference points at (``ref``): ``components.schemas`` holds exactly these
_REFERENCED: dict[str, tuple[type[BaseModel], JsonSchemaMode]] = {}


def ref(model: type[BaseModel], mode: JsonSchemaMode = "serialization") -> Schema:
    """A reference to ``model``'s schema in ``components.schemas`` (which then holds it):
    as it is answered, or with ``mode="validation"`` as a body is read into it."""
    _REFERENCED.setdefault(model.__name__, (model, mode))
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def referenced_model(reference: str) -> type[BaseModel]:
    """The model a reference of :func:`ref` names (``#/components/schemas/<name>``)."""
    return _REFERENCED[reference.rsplit("/", 1)[1]][0]


def components() -> dict[str, Schema]:
    """The JSON schemas of every model referenced, keyed by model name (with the models
    they use)."""
    _, top = models_json_schema(
        list(_REFERENCED.values()),
        ref_template="#/components/schemas/{model}",
    )
    schemas: dict[str, Schema] = top.get("$defs", {})
    return schemas
