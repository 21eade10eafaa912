"""Service settings, read from ``MAPSVC_*`` environment variables and a ``.env`` file.

One class per concern (`TileSettings`, `VectorSettings`, `JobSettings`, …), each reading its own
variables; `Settings` holds the core fields and one instance of each concern. The variable of
a field is its concern's prefix and its key (`Concern.key`): its name (``settings.s3.bucket`` is
``MAPSVC_S3_BUCKET``, ``settings.tiles.render_queue_max`` is ``MAPSVC_RENDER_QUEUE_MAX``), or
its alias where the name drops the concern the variable repeats (``settings.jobs.wait_s`` is
``MAPSVC_JOB_WAIT_S``). ``Settings(...)`` and `Settings.model_copy` also take a field by its
flat name, the variable's less ``MAPSVC_`` (``s3_bucket=…``, ``job_wait_s=…``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, get_args
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)
from pydantic_settings.sources import ENV_FILE_SENTINEL, DotenvType

from shared.logs import LogFormat
from shared.workdir import WorkDir

__all__ = [
    "ADMIN_KEY_MIN",
    "AuthSettings",
    "KEYED_PROVIDERS",
    "LANG_PATTERN",
    "PROVIDER_DEFAULTS",
    "ConvertSettings",
    "JobSettings",
    "MetricsSettings",
    "ProviderSettings",
    "Providers",
    "ProxySettings",
    "RasterSettings",
    "S3Settings",
    "SecretFiles",
    "Settings",
    "SourceSettings",
    "TileSettings",
    "UploadSettings",
    "VectorSettings",
    "env_values",
    "file_fields",
]

#: Providers that need a key besides their URL (``MAPSVC_<NAME>_API_KEY``).
KEYED_PROVIDERS = frozenset({"here", "mapbox", "owm"})
#: The fewest characters of ``MAPSVC_ADMIN_API_KEY``.
ADMIN_KEY_MIN = 32


#: A language tag (``en``, ``pt-BR``): ``MAPSVC_LANGUAGES`` lists them, ``lang`` names one.
LANG_PATTERN = r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$"
_LANG = re.compile(LANG_PATTERN)

#: A comma-separated setting, split into its trimmed, non-empty items when settings load.
CommaList = Annotated[tuple[str, ...], NoDecode]


def blank_is_unset(value: object) -> object:
    """``None`` for a blank string (an env var set to nothing), else ``value`` unchanged."""
    return None if isinstance(value, str) and not value.strip() else value


def split_commas(value: str) -> tuple[str, ...]:
    """The trimmed, non-empty items of a comma-separated string."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)$")


def host_port(value: str | None) -> str | None:
    """``<host>:<port>`` (a name, an IPv4 address or a bracketed IPv6 one), stripped; None stays.

    Raises:
        ValueError: anything else (it is written into a configuration: nginx's, gRPC's).
    """
    if value is None:
        return None
    host, sep, port = value.strip().rpartition(":")
    if not sep or not _HOST.match(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected <ip>:<port>, got {value!r}")
    return value.strip()


def file_fields(cls: type[Concern]) -> list[str]:
    """The fields of ``cls`` that may be read from a file: its `SecretStr` fields, and those
    whose key is in its ``secret_fields`` (a URL that holds a password)."""
    return [
        name
        for name, field in cls.model_fields.items()
        if SecretStr in (field.annotation, *get_args(field.annotation))
        or cls.key(name) in cls.secret_fields
    ]


class SecretFiles(PydanticBaseSettingsSource):
    """``<VARIABLE>_FILE``: a secret setting read from the file that variable names.

    Docker's and Kubernetes' secrets are files (``/run/secrets/<name>``). For every secret
    field of a concern (:func:`file_fields`), ``<prefix><FIELD>_FILE`` in the environment or
    ``.env`` names a file whose text, less a trailing line break, is the value. A setting is
    given one way: the variable and its ``_FILE`` both set (not blank) are refused.
    """

    def __init__(self, settings_cls: type[Concern], *sources: PydanticBaseSettingsSource) -> None:
        """Look the ``_FILE`` variables up in ``sources`` (the environment, ``.env``: the first
        wins), with the prefix of the first."""
        super().__init__(settings_cls)
        self._concern = settings_cls
        readers = [source for source in sources if isinstance(source, EnvSettingsSource)]
        self._prefix = readers[0].env_prefix
        self._variables: dict[str, str] = {}
        for reader in reversed(readers):
            self._variables.update(
                (name.upper(), value)
                for name, value in reader.env_vars.items()
                if value and value.strip()
            )

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Unused: :meth:`__call__` reads every secret field at once."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        """The secret fields whose ``_FILE`` variable is set, each the text of its file.

        Raises:
            SettingsError: a variable set with its ``_FILE`` too, or a file that cannot be read.
        """
        values: dict[str, Any] = {}
        for name in file_fields(self._concern):
            key = self._concern.key(name)
            variable = f"{self._prefix}{key}".upper()
            path = self._variables.get(f"{variable}_FILE")
            if path is None:
                continue
            if variable in self._variables:
                raise SettingsError(f"set {variable} or {variable}_FILE, not both")
            try:
                values[key] = Path(path).read_text().rstrip("\r\n")
            except (OSError, UnicodeDecodeError) as exc:
                raise SettingsError(f"{variable}_FILE: cannot read {path}: {exc}") from exc
        return values


class Concern(BaseSettings):
    """The settings of one concern: variables ``<env_prefix><KEY>``, frozen once read.

    A field's key (`key`) is its name, or its ``validation_alias`` where the name drops the
    concern that the variable repeats: ``wait_s`` of `JobSettings` is given as ``job_wait_s``
    (``MAPSVC_JOB_WAIT_S``), at init as in the environment; only the variable reads it.
    Fields whose key is listed in ``blank_fields`` are unset when their variable is blank;
    those in ``comma_fields`` are split at commas. Secret fields may be read from a file
    instead (`SecretFiles`): `SecretStr` fields and those listed in ``secret_fields``.
    """

    # env_prefix_target: the prefix goes before an alias too (MAPSVC_ + job_wait_s)
    model_config = SettingsConfigDict(
        env_prefix="MAPSVC_",
        env_prefix_target="all",
        env_file=".env",
        extra="ignore",
        frozen=True,
    )
    blank_fields: ClassVar[tuple[str, ...]] = ()
    comma_fields: ClassVar[tuple[str, ...]] = ()
    secret_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Values given at init, the ``*_FILE`` secrets, the environment, then ``.env``.

        A secret from a file goes before a blank variable (compose's ``${NAME:-}``).
        """
        secrets = SecretFiles(cls, env_settings, dotenv_settings)
        return init_settings, secrets, env_settings, dotenv_settings

    @model_validator(mode="before")
    @classmethod
    def _blanks_and_commas(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name in cls.blank_fields:
            if name in data:
                data[name] = blank_is_unset(data[name])
        for name in cls.comma_fields:
            if isinstance(data.get(name), str):
                data[name] = split_commas(data[name])
        return data

    @classmethod
    def key(cls, name: str) -> str:
        """What field ``name`` is given as, in its variable (after the prefix) and at init: its
        alias if it has one (``statement_timeout_ms`` of `VectorSettings` is
        ``vector_statement_timeout_ms``), else its name."""
        alias = cls.model_fields[name].validation_alias
        return alias if isinstance(alias, str) else name

    @classmethod
    def variable(cls, name: str) -> str:
        """The environment variable of field ``name``: ``MAPSVC_VECTOR_STATEMENT_TIMEOUT_MS``."""
        return f"{cls.model_config.get('env_prefix', '')}{cls.key(name)}".upper()

    @classmethod
    def flat_prefix(cls) -> str:
        """What a field's flat name starts with: its variable's name less ``MAPSVC_``."""
        return str(cls.model_config.get("env_prefix", "")).removeprefix("MAPSVC_").lower()

    def updated(self, changes: Mapping[str, Any]) -> Self:
        """These settings with ``changes`` (by key, `key`) applied and validated again."""
        return self.model_validate({**{self.key(name): value for name, value in self}, **changes})


class ProviderSettings(Concern):
    """One external provider (spec 2.7–2.10, 4.10–4.16), read from ``MAPSVC_<NAME>_*``.

    One instance per provider (see `Providers`): the environment prefix is given when it is
    made, and so are the provider's defaults (passed as init values, which the environment
    and ``.env`` override).
    """

    blank_fields = ("url", "api_key")

    url: str | None = Field(
        default=None,
        description="Base URL of the provider (see [Providers](#providers)); empty: not configured",
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="The provider's key (see [Providers](#providers)); unset: not configured",
    )
    cache_ttl_s: int = Field(
        default=86400, ge=1, description="How long the provider's answers are cached"
    )
    rate_per_s: float = Field(
        default=1.0, gt=0, description="Most calls per second to the provider, over all processes"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The ``*_FILE`` secrets, the environment, ``.env``, then the defaults given at init."""
        secrets = SecretFiles(cls, env_settings, dotenv_settings)
        return secrets, env_settings, dotenv_settings, init_settings


#: Each provider's defaults, which its variables override.
PROVIDER_DEFAULTS: dict[str, dict[str, object]] = {
    "nominatim": {},
    "photon": {"rate_per_s": 5.0},
    "here": {"url": "https://revgeocode.search.hereapi.com", "rate_per_s": 5.0},
    "mapbox": {"url": "https://api.mapbox.com", "rate_per_s": 10.0},
    "osrm": {"cache_ttl_s": 3600, "rate_per_s": 5.0},
    "valhalla": {"cache_ttl_s": 3600, "rate_per_s": 5.0},
    "owm": {"url": "https://api.openweathermap.org", "cache_ttl_s": 600},
    "opentopodata": {},
    "kadastr": {"rate_per_s": 2.0},
}


class Providers(Concern):
    """The provider client (``MAPSVC_PROVIDER_*``) and one `ProviderSettings` per provider."""

    model_config = SettingsConfigDict(env_prefix="MAPSVC_PROVIDER_")

    connect_timeout_s: float = Field(
        default=3.0,
        gt=0,
        description="Connect timeout of every provider call (and of `gis-url-proxy`)",
    )
    timeout_s: float = Field(
        default=10.0, gt=0, description="Read/write timeout of a provider call"
    )
    max_connections: int = Field(
        default=100,
        ge=1,
        description="Most open connections of the provider client of "
        "one API process (20 kept alive)",
    )
    retries: int = Field(
        default=2,
        ge=0,
        le=5,
        description="Retries of a provider GET after a connect error or a 5xx answer",
    )
    backoff_s: float = Field(
        default=0.2, ge=0, description="Delay before the first retry; doubled for each next one"
    )
    rate_wait_s: float = Field(
        default=10.0,
        gt=0,
        description="Longest wait for a provider's rate-limit slot; a "
        "longer queue answers 503 at once",
    )
    cache_max_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="Byte budget of cached provider answers (64 MiB)",
    )
    nominatim: ProviderSettings
    photon: ProviderSettings
    here: ProviderSettings
    mapbox: ProviderSettings
    osrm: ProviderSettings
    valhalla: ProviderSettings
    owm: ProviderSettings
    opentopodata: ProviderSettings
    kadastr: ProviderSettings

    def __init__(self, _env_file: DotenvType | None = ENV_FILE_SENTINEL, **values: Any) -> None:
        for name, defaults in PROVIDER_DEFAULTS.items():
            if name not in values:
                values[name] = ProviderSettings(
                    _env_prefix=f"MAPSVC_{name.upper()}_",  # type: ignore[call-arg]
                    _env_file=_env_file,
                    **defaults,  # type: ignore[arg-type]
                )
        super().__init__(_env_file=_env_file, **values)  # type: ignore[call-arg]

    def named(self, name: str) -> ProviderSettings:
        """The settings of provider ``name`` (a key of `PROVIDER_DEFAULTS`)."""
        found: ProviderSettings = dict(self)[name]
        return found


class TileSettings(Concern):
    """Raster tiles: rendering, limits of one render, cache headers, pre-tiling. ``MAPSVC_*``."""

    render_processes: int = Field(
        default=0, ge=0, description="Tile render processes of each API process (0 = one per CPU)"
    )
    render_queue_max: int = Field(
        default=64,
        ge=1,
        description="Renders waiting or running per API process; past it `503` with `Retry-After`",
    )
    render_max_large: int = Field(
        default=1,
        ge=1,
        description="BBOX renders larger than a tile at once per API process (keep it below the "
        "render processes, so tiles always have one); the others wait their turn, in order, "
        "within `MAPSVC_RENDER_QUEUE_MAX` and `MAPSVC_RENDER_TIMEOUT_S`",
    )
    render_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest wait for one render (its turn included); then `503` with"
        " `Retry-After`",
    )
    render_warm_up: bool = Field(
        default=True,
        description="Start the render processes (Mapnik loaded) when the API starts, in the "
        "background, rather than on the first render",
    )
    render_max_pixels: int = Field(
        default=4096 * 4096,
        ge=65536,
        description="Largest `width` x `height` of a BBOX render (4096 x 4096); each side is also "
        "at most `MAPSVC_TILE_MAX_SIZE`",
    )
    max_size: int = Field(
        validation_alias="tile_max_size",
        default=4096,
        ge=256,
        le=16384,
        description="Largest width or height of a BBOX render",
    )
    max_age_s: int = Field(
        validation_alias="tile_max_age_s",
        default=3600,
        ge=0,
        description="`Cache-Control: max-age` of tile responses",
    )
    jpeg_quality: int = Field(
        default=85,
        ge=1,
        le=100,
        description="Quality (1–100) of JPEG tiles (`.jpg`, `.jpeg`); tiles cached before a "
        "change keep theirs until the layer's tiles are dropped",
    )
    webp_quality: int = Field(
        default=80,
        ge=1,
        le=100,
        description="Quality (1–100) of lossy WebP tiles (`.webp`); unused "
        "when `MAPSVC_WEBP_LOSSLESS` is on",
    )
    webp_lossless: bool = Field(
        default=False,
        description="`.webp` tiles lossless: the PNG's exact pixels in about half "
        "its bytes (measured 0.54 on the Landsat tiles, zooms 8–12), but about "
        "ten times the bytes of lossy WebP",
    )
    pretile_max_tiles: int = Field(
        default=4_000_000,
        ge=1,
        description="Most tiles of one pre-tiling run, its whole first zoom included; a "
        "larger plan is `422` with the plan",
    )
    export_max_bytes: int = Field(
        default=16 * 2**30,
        ge=1,
        description="Largest export file (16 GiB): an export that grows past it stops with a "
        "job error (nothing is left)",
    )
    min_free_disk_bytes: int = Field(
        default=2**30,
        ge=0,
        description="Free space kept on the work dir's disk (1 GiB): an export, or a seed into "
        "the disk cache, stops with a job error before leaving less",
    )
    seed_max_concurrent_runs: int = Field(
        default=0,
        ge=0,
        description="Most pre-tiling runs going at once, whatever their layers (0: no limit); "
        "a run beyond it waits, queued, for one to end",
    )
    seed_max_failed_tiles: int = Field(
        default=1000,
        ge=0,
        description="Failed tiles (of chunks given up after their retries) that end a "
        "pre-tiling run as failed; below it, the run goes on and lists them in its result",
    )
    metatile_size: int = Field(
        default=8,
        ge=1,
        le=8,
        description="Pre-tiling draws blocks of N x N tiles of a style that draws vectors as one "
        "image (metatiles), then cuts them: labels whole across tile borders, Mapnik's cost per "
        "render paid once per block; 1 draws tile by tile. At most 8 (a chunk of work). A style "
        "of rasters alone is drawn tile by tile; a layer's own `metatile` parameter wins. Tiles "
        "asked on demand are drawn alone",
    )
    metatile_buffer: int = Field(
        default=128,
        ge=0,
        le=1024,
        description="Pixels drawn around a metatile and cut away (what lies that far past the "
        "block is drawn too: labels of the tiles around); Mapnik's `buffer-size` of the render. "
        "None for a style of rasters alone (nothing of theirs crosses a tile's border)",
    )


class VectorSettings(Concern):
    """Vector layers from PostGIS: catalogue, GeoJSON, vector tiles, their cache. ``MAPSVC_*``."""

    comma_fields = ("vector_schemas",)

    schemas: CommaList = Field(
        validation_alias="vector_schemas",
        default=("public",),
        description="Comma-separated schemas whose geometry tables and views are layers",
    )
    config: Path | None = Field(
        validation_alias="vector_config",
        default=None,
        description="JSON file of layer aliases, zooms and named queries",
    )
    catalog_ttl_s: int = Field(
        validation_alias="vector_catalog_ttl_s",
        default=60,
        ge=0,
        description="How long the catalogue of vector layers is kept",
    )
    statement_timeout_ms: int = Field(
        validation_alias="vector_statement_timeout_ms",
        default=10000,
        ge=100,
        description="PostgreSQL statement timeout of the API's queries; those of the auth tables "
        "have their own, `MAPSVC_AUTH_STATEMENT_TIMEOUT_MS`",
    )
    filter_timeout_ms: int = Field(
        default=2000,
        ge=100,
        description="Statement timeout of the queries a caller's `filter` picks rows by "
        "(GeoJSON, OGC items, vector tiles), at most `MAPSVC_VECTOR_STATEMENT_TIMEOUT_MS`; keep "
        "it below `MAPSVC_DB_POOL_TIMEOUT_S` (3 s), so that filters holding every connection "
        "free one before another request's wait for one ends. Past it the answer is `503`",
    )
    cache_max_bytes: int = Field(
        validation_alias="vector_cache_max_bytes",
        default=256 * 1024 * 1024,
        ge=0,
        description="Byte budget of cached GeoJSON answers and vector "
        "tiles (256 MiB; `0`: no cache)",
    )
    geojson_max_features: int = Field(
        default=10000, ge=1, description="Default and largest `limit` of a GeoJSON answer"
    )
    geojson_max_s: float = Field(
        default=60.0,
        gt=0,
        description="Longest time a GeoJSON answer streams, however slowly the client reads; also "
        "PostgreSQL's `idle_in_transaction_session_timeout`",
    )
    geojson_buffer_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=0,
        description="GeoJSON read ahead of the client into memory (16 MiB); a page that fits "
        "frees its database connection before a slow client reads it",
    )
    vtile_max_features: int = Field(
        default=20000, ge=1, description="Most features in one vector tile"
    )
    vtile_simplify_px: float = Field(
        default=0.5,
        ge=0,
        le=16,
        description="How far a vector tile's lines and outlines may be simplified, in pixels of "
        "its zoom (256 px tiles; points never are; `0`: not at all); a layer's `simplify` in the "
        "layer config file says otherwise for it",
    )
    vtile_cache_ttl_s: int = Field(
        default=3600, ge=0, description="How long vector tiles and GeoJSON answers are cached"
    )
    watch_buffer_px: int = Field(
        default=16,
        ge=0,
        le=256,
        description="Pixels around each tile that a change of a watched layer in them makes "
        "stale (symbols and labels drawn past a feature)",
    )
    watch_poll_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="The longest the follower of watched layers waits between two reads of "
        "the change log (it is woken at once by each change's NOTIFY)",
    )
    watch_settle_s: float = Field(
        default=12.0,
        ge=0,
        description="When the follower expires the same tiles again: keep it above the "
        "statement timeout (`MAPSVC_VECTOR_STATEMENT_TIMEOUT_MS`), so that a tile read before a "
        "change and stored after its expiry is dropped too",
    )


class JobSettings(Concern):
    """Jobs, Celery workers and the event streams that report on them. ``MAPSVC_*``."""

    wait_s: float = Field(
        validation_alias="job_wait_s",
        default=10.0,
        ge=0,
        description="How long a heavy endpoint waits for its job before answering 202",
    )
    soft_time_limit_s: int = Field(
        validation_alias="job_soft_time_limit_s",
        default=3600,
        ge=1,
        description="Soft time limit of a job (the job is stopped with a clear error)",
    )
    time_limit_s: int = Field(
        validation_alias="job_time_limit_s",
        default=3900,
        ge=1,
        description="Hard time limit (the process is killed); the Redis "
        "visibility timeout is 600 s longer",
    )
    max_attempts: int = Field(
        validation_alias="job_max_attempts",
        default=2,
        ge=1,
        description="Starts of a job whose worker process died, before it fails",
    )
    stall_s: float = Field(
        validation_alias="job_stall_s",
        default=900.0,
        gt=0,
        description="A started job that writes no line for this long is ended as failed (its "
        "worker vanished or its fan-out stalled)",
    )
    watchdog_interval_s: float = Field(
        validation_alias="job_watchdog_interval_s",
        default=60.0,
        gt=0,
        description="How often the beat embedded in `mapsvc worker` runs the stalled-job watchdog",
    )
    worker_concurrency: int = Field(
        default=0, ge=0, description="Processes per Celery worker (0 = one per CPU)"
    )
    worker_max_tasks_per_child: int = Field(
        default=1000,
        ge=0,
        description="A worker process is replaced after this many tasks (Celery's "
        "`worker_max_tasks_per_child`; `0`: never)",
    )
    worker_max_memory_mb: int = Field(
        default=2048,
        ge=0,
        description="A worker process is replaced after a task that left it above this resident "
        "size (Celery's `worker_max_memory_per_child`; `0`: no ceiling)",
    )
    worker_nice: int = Field(
        default=19,
        ge=0,
        le=19,
        description="How much nicer (Linux `nice`) a worker's processes run than the worker: "
        "pre-tiling chunks and jobs yield the CPU to the API's tile renders (which run 5 nicer "
        "than the API); a worker that leads its session gives its session's autogroup this "
        "nice too. `0`: the same priority",
    )
    events_ttl_s: int = Field(
        default=86400, ge=60, description="How long a job's record and event lines are kept"
    )
    events_maxlen: int = Field(default=10000, ge=100, description="Most lines kept per job stream")
    sse_keepalive_s: float = Field(
        default=15.0,
        gt=0,
        description="Idle time after which an SSE stream sends a `: keep-alive` comment",
    )
    sse_max_streams: int = Field(
        default=200,
        ge=1,
        description="SSE streams open at once per API process; past it `503` with `Retry-After: 5`",
    )
    sse_streams_per_caller: int = Field(
        default=8,
        ge=1,
        description="SSE streams one caller (a principal, or an anonymous client's address) may "
        "have open at once per API process; past it `429` with `Retry-After: 5`",
    )
    sse_max_duration_s: float = Field(
        default=3600.0,
        gt=0,
        description="Longest life of one SSE stream; it then ends and the "
        "client resumes with `Last-Event-ID`",
    )
    stream_redis_max_connections: int = Field(
        default=250,
        ge=1,
        description="Redis connections per API process for SSE streams and heavy-endpoint waits, "
        "a pool apart from the rest of the API",
    )
    stream_redis_wait_s: float = Field(
        default=1.0,
        gt=0,
        description="Longest wait for one of those connections; then `503` with `Retry-After: 2`",
    )


class MetricsSettings(Concern):
    """Prometheus metrics (``GET /metrics``), ``MAPSVC_METRICS_*``."""

    model_config = SettingsConfigDict(env_prefix="MAPSVC_METRICS_")

    blank_fields = ("dir",)

    dir: Path | None = Field(
        default=None,
        description="Folder of the metric files of the API and worker processes "
        "(prometheus-client's multiprocess mode; a folder per host inside), read by `GET "
        "/metrics`; `mapsvc serve`, `worker` and `up` set `PROMETHEUS_MULTIPROC_DIR` from "
        "it; unset: `<work_dir>/metrics`",
    )
    tile_zoom: bool = Field(
        default=False,
        description="Tile cache hits and misses "
        "(`mapsvc_tile_cache_requests_total`) carry a `zoom` label too",
    )


class S3Settings(Concern):
    """Tiles in S3-compatible object storage (`isS3=1`), ``MAPSVC_S3_*``; no endpoint: none."""

    model_config = SettingsConfigDict(env_prefix="MAPSVC_S3_")

    blank_fields = ("endpoint_url", "access_key_id", "secret_access_key")

    endpoint_url: str | None = Field(
        default=None,
        description="URL of the S3-compatible endpoint of the tile cache of `isS3=1` (e.g. "
        "`http://127.0.0.1:9000`, `https://s3.eu-central-1.amazonaws.com`); unset: no "
        "object storage, `isS3=1` answers 503",
    )
    bucket: str = Field(
        default="mapsvc-tiles",
        min_length=3,
        max_length=63,
        description="Bucket of the tiles; it must exist (it is not created)",
    )
    prefix: str = Field(
        default="",
        description="Folder of the tiles in the bucket: `tiles` gives keys `tiles/<style>/…`",
    )
    access_key_id: SecretStr | None = Field(
        default=None,
        description="Access key; unset together with the secret: boto3's own chain (`AWS_*` "
        "variables, `~/.aws`, an instance role)",
    )
    secret_access_key: SecretStr | None = Field(
        default=None, description="Secret key of that access key (set both or neither)"
    )
    region: str = Field(default="us-east-1", description="Region the requests are signed for")
    addressing_style: Literal["path", "virtual", "auto"] = Field(
        default="path",
        description="`path` (bucket in the URL path: MinIO, Ceph, moto; works on AWS too) or "
        "`virtual` (bucket in the host name) or `auto`",
    )

    @model_validator(mode="after")
    def _keys_go_together(self) -> S3Settings:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError(
                "set both MAPSVC_S3_ACCESS_KEY_ID and MAPSVC_S3_SECRET_ACCESS_KEY, or neither"
            )
        return self


class RasterSettings(Concern):
    """Where the source rasters are read from, ``MAPSVC_RASTER_*``: the work dir or a bucket.

    ``s3`` reads them through GDAL's ``/vsis3/`` with the endpoint, keys, region and addressing
    style of `S3Settings` (``MAPSVC_S3_*``); only the bucket and prefix are the rasters' own.
    """

    model_config = SettingsConfigDict(env_prefix="MAPSVC_RASTER_")

    store: Literal["file", "s3"] = Field(
        default="file",
        description="Where the source rasters are read: `file` (`<work_dir>/map/raster`) or `s3` "
        "(`MAPSVC_RASTER_S3_BUCKET`, through GDAL's `/vsis3/`, at `MAPSVC_S3_ENDPOINT_URL` with "
        "the `MAPSVC_S3_*` keys, region and addressing style; the endpoint must be set, and it "
        "turns the `isS3=1` tile cache on as well)",
    )
    s3_bucket: str = Field(
        default="mapsvc-rasters",
        min_length=3,
        max_length=63,
        description="Bucket of the source rasters when `MAPSVC_RASTER_STORE` is `s3`; it "
        "must exist (it is not created)",
    )
    s3_prefix: str = Field(
        default="",
        description="Folder of the rasters in that bucket: `raster` makes the path `single/a.tif` "
        "the key `raster/single/a.tif` (raster ids, listings and `commpress/` are relative to it)",
    )


class ConvertSettings(Concern):
    """The Convert helper (spec 4.17), ``MAPSVC_CONVERT_*``; the spec's `convertServerAddress`
    is `server_address`."""

    model_config = SettingsConfigDict(env_prefix="MAPSVC_CONVERT_")

    blank_fields = ("server_address", "token")

    server_address: str | None = Field(
        default=None,
        description="`<ip>:<port>` of the Convert gRPC server (the spec's "
        "`convertServerAddress`); unset: no client, `/pdf-merge` answers 503 "
        "(`mapsvc up` sets it for its API)",
    )
    bind: str = Field(
        default="127.0.0.1",
        description="Address the Convert server binds to; `0.0.0.0` or `::` for all interfaces "
        "(what spec 4.17 shows), e.g. in compose where the API reaches it over the network",
    )
    port: int = Field(
        default=4003,
        ge=1,
        le=65535,
        description="Port `mapsvc convert-server` listens on (its first argument overrides it)",
    )
    token: SecretStr | None = Field(
        default=None,
        description="Access token: the server refuses calls without `authorization: "
        "Bearer <token>`, clients send it",
    )
    max_message_bytes: int = Field(
        default=536870912,
        ge=1024,
        description="Largest gRPC message each way, for server and client (512 MiB)",
    )
    timeout_s: float = Field(
        default=120.0, gt=0, description="Deadline of a Convert call made by the API"
    )
    max_pending: int = Field(
        default=20,
        ge=0,
        description="Convert calls that may wait for one of the 10 workers; past `10 + this` the "
        'server refuses at once (`RESOURCE_EXHAUSTED`, the API answers `503` "busy")',
    )

    _check_address = field_validator("server_address")(host_port)


class UploadSettings(Concern):
    """Request bodies and files of `pdf-merge`. ``MAPSVC_UPLOAD_*``."""

    model_config = SettingsConfigDict(env_prefix="MAPSVC_UPLOAD_")

    max_bytes: int = Field(
        default=128 * 1024 * 1024,
        ge=1024,
        description="Largest request body of `pdf-merge` (128 MiB), and the most all its PDFs may "
        "total on the Convert server; over it: `413`",
    )
    max_file_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="Largest PDF `pdf-merge` takes (64 MiB), uploaded or named by "
        "a work-dir path; over it: `413`",
    )


class ProxySettings(Concern):
    """What `gis-url-proxy` may fetch and relay. ``MAPSVC_PROXY_*``."""

    model_config = SettingsConfigDict(env_prefix="MAPSVC_PROXY_")

    comma_fields = ("allow_hosts", "trusted_addresses", "content_types", "cors_origins")

    allow_hosts: CommaList = Field(
        default=(),
        description="Comma-separated hosts `gis-url-proxy` may fetch (`tiles.example.org`, "
        "`*.example.org` for its sub-domains); empty: every URL is refused",
    )
    trusted_addresses: CommaList = Field(
        default=(),
        description="Comma-separated `ip:port` the proxy may reach although they are not public "
        "(an internal WMS; the tests' fake server); everything else private stays refused",
    )
    content_types: CommaList = Field(
        default=split_commas(
            "image/*,application/json,application/*+json,text/json,application/xml,"
            "application/*+xml,text/xml,application/x-protobuf,"
            "application/vnd.mapbox-vector-tile,text/plain"
        ),
        description="Comma-separated media types the proxy relays (`type/*` and `type/*+suffix` "
        "patterns); other answers are `520`. HTML and JavaScript are never relayed",
    )
    cors_origins: CommaList = Field(
        default=(),
        description="Comma-separated origins that may read proxied answers from a "
        "browser (`https://map.example.org`; echoed in "
        "`Access-Control-Allow-Origin`), or `*`; empty: no CORS header",
    )
    max_bytes: int = Field(
        default=20 * 1024 * 1024, ge=1024, description="Largest body the proxy relays (20 MiB)"
    )
    timeout_s: float = Field(
        default=30.0, gt=0, description="Longest time of one proxied fetch, redirects included"
    )
    max_redirects: int = Field(
        default=5,
        ge=0,
        le=20,
        description="Redirects the proxy follows (each target checked like the first URL)",
    )


class SourceSettings(Concern):
    """Which provider or local source answers each integration endpoint. ``MAPSVC_*``."""

    geocode_provider: Literal["nominatim", "photon"] = Field(
        default="nominatim", description="Provider of `geocode`: `nominatim` or `photon`"
    )
    reverse_a_provider: Literal["here", "nominatim", "photon"] = Field(
        default="here",
        description="Provider of `geocoder_a` of `reverse-geocode`: "
        "`here`, `nominatim` or `photon`",
    )
    reverse_b_provider: Literal["mapbox", "nominatim", "photon"] = Field(
        default="mapbox",
        description="Provider of `map` of `reverse-geocode`: `mapbox`, `nominatim` or `photon`",
    )
    route_provider: Literal["osrm", "valhalla"] = Field(
        default="osrm", description="Provider of `map-route`: `osrm` or `valhalla`"
    )
    height_source: Literal["dem", "opentopodata", "dem+opentopodata"] = Field(
        default="dem",
        description="Source of `height`: `dem` (local DEMs in `<workDir>/map/dem`), "
        "`opentopodata`, or `dem+opentopodata` (the provider for points no DEM covers)",
    )
    opentopodata_dataset: str = Field(
        default="srtm90m",
        pattern=r"^[A-Za-z0-9_,-]+$",
        description="Dataset asked of Open Topo Data (`/v1/<dataset>`)",
    )
    dzk_source: Literal["local", "kadastr", "local+kadastr"] = Field(
        default="local",
        description="Source of `dzk`: `local` (the PostGIS table), `kadastr`, or `local+kadastr` "
        "(the provider when the table has no answer)",
    )
    parcels_table: str = Field(
        default="parcels",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$",
        description="PostGIS table of land parcels (`name` or `schema.name`), columns in "
        "[Providers: `dzk`](api/providers.md#dzk)",
    )


class AuthSettings(Concern):
    """Who may call what: credentials, tokens, public layers, CORS, quotas. ``MAPSVC_*``."""

    # a refused value is a secret: the error names the field, never the value
    model_config = SettingsConfigDict(hide_input_in_errors=True)
    comma_fields = ("jwt_secrets", "public_layers", "cors_origins")
    secret_fields = ("jwt_secrets",)
    blank_fields = ("admin_api_key", "flower_basic_auth")

    admin_api_key: SecretStr | None = Field(
        default=None,
        description="A key accepted as an admin key, for automation (compared in constant time;"
        f" never stored); at least {ADMIN_KEY_MIN} characters (`openssl rand -hex 32`), else no"
        " process starts",
    )
    jwt_secrets: CommaList = Field(
        default=(),
        description="Comma-separated `kid:secret` HS256 keys (secrets of 32 bytes or more): the "
        "first signs access tokens, all verify (rotation: put the new key first, keep the old one "
        "until its tokens expire); empty: one is made and kept in `<work_dir>/auth/secrets.json` "
        "(mode 0600), fine for one host",
    )
    jwt_ttl_s: int = Field(default=900, ge=30, description="Lifetime of an access token (JWT)")
    refresh_ttl_s: int = Field(
        default=30 * 86400,
        ge=60,
        description="Lifetime of an OAuth 2.0 refresh token (30 days); each use gives a new one",
    )
    code_ttl_s: int = Field(
        validation_alias="auth_code_ttl_s",
        default=60,
        ge=5,
        le=600,
        description="Lifetime of an OAuth 2.0 authorization code (single use)",
    )
    public_layers: CommaList = Field(
        default=(),
        description="Comma-separated layer ids whose tiles, TileJSON and GeoJSON answer "
        "without credentials; `*`: every layer",
    )
    cors_origins: CommaList = Field(
        default=("*",),
        description="Comma-separated origins that may call the API from a browser; `*`: "
        "any (then never with credentials)",
    )
    login_max_failures: int = Field(
        default=5,
        ge=1,
        description="Failed logins of one account from one client address before the account is "
        "locked for that address (and only it) for `MAPSVC_LOGIN_LOCK_S` (`429 "
        "account-locked`); from as many failures in a row from anywhere, the account's backoff "
        "(1 s, doubling with each failure up to `MAPSVC_LOGIN_LOCK_S`) refuses addresses that "
        "have failed on it, never one that has not",
    )
    login_lock_s: int = Field(
        default=300,
        ge=1,
        description="How long a lock for an address lasts, the longest backoff, and the window "
        "of every count of failed logins",
    )
    login_address_max_failures: int = Field(
        default=20,
        ge=1,
        description="Failed logins from one client address in that window, "
        "whatever the accounts; then `429`",
    )
    rate_tiles_per_min: int = Field(
        default=6000,
        ge=1,
        description="Raster and vector tiles per minute per caller (a principal, or an "
        "address when anonymous); then `429`",
    )
    rate_data_per_min: int = Field(
        default=600,
        ge=1,
        description="GeoJSON, TileJSON, listings, statistics and metadata per minute per caller",
    )
    rate_providers_per_min: int = Field(
        default=120,
        ge=1,
        description="Provider calls (geocode, route, weather, height, proxy, "
        "parcels) per minute per caller",
    )
    rate_jobs_per_min: int = Field(
        default=30,
        ge=1,
        description="Job starts (configure, compress, pre-tile, speed test, "
        "PDF merge) per minute per caller",
    )
    rate_documents_per_min: int = Field(
        default=1200,
        ge=1,
        description="Pages, web files, the OpenAPI document, health and readiness per minute per "
        "caller",
    )
    rate_auth_per_min: int = Field(
        default=120,
        ge=1,
        description="Logins, token requests and authorizations (valid or not) per minute per "
        "caller",
    )
    rate_admin_per_min: int = Field(
        default=600,
        ge=1,
        description="Admin routes (users, keys, clients) and `/metrics` per minute per caller",
    )
    rate_failed_auth_per_min: int = Field(
        default=30,
        ge=1,
        description="API keys and bearer tokens that are not valid, per minute per client address "
        "(a window from the first); past it, keys and tokens from that address that are not valid "
        "or not known without a look-up answer `429 rate-limited` with `Retry-After`, before any "
        "PostgreSQL look-up. Valid tokens and keys looked up in the last 30 s still pass",
    )
    statement_timeout_ms: int = Field(
        validation_alias="auth_statement_timeout_ms",
        default=5000,
        ge=100,
        description="PostgreSQL statement timeout of the API's queries of the auth tables "
        "(credential look-ups, logins, the admin routes); past it the request answers `503`. The "
        "vector queries have their own, `MAPSVC_VECTOR_STATEMENT_TIMEOUT_MS`",
    )
    flower_basic_auth: SecretStr | None = Field(
        default=None,
        description="`login:password` Flower asks for; unset: `mapsvc:<random>` kept in the "
        "secrets file. `mapsvc flower` and `mapsvc up` hand it to Flower in its environment "
        "(`FLOWER_BASIC_AUTH`), never on its command line",
    )

    @field_validator("admin_api_key")
    @classmethod
    def _long_admin_key(cls, key: SecretStr | None) -> SecretStr | None:
        """An admin key is as hard to guess as the keys the service makes, or refused."""
        if key is not None and len(key.get_secret_value()) < ADMIN_KEY_MIN:
            raise ValueError(
                f"MAPSVC_ADMIN_API_KEY is {len(key.get_secret_value())} characters long; an"
                f" admin key needs at least {ADMIN_KEY_MIN} (make one: openssl rand -hex 32)"
            )
        return key


class Settings(Concern):
    """Everything a process of the service needs to know about its surroundings.

    The core fields are here; every other concern is one attribute (``settings.tiles``, …).
    """

    comma_fields = ("allowed_hosts", "languages")
    blank_fields = ("front_resolver",)
    secret_fields = ("database_url", "redis_url")  # their passwords

    work_dir: Path = Field(
        default=Path("work"),
        description="Root of `map/raster`, `map/rtile`, `map/mapnik`, `map/dem` (created on start)",
    )
    demo_data_dir: Path | None = Field(
        default=None,
        description="Folder `mapsvc demo-data` copies rasters from and loads the countries from "
        "(its `--data-dir` overrides it); unset: the checkout's `deploy/demo-data`. The Docker "
        "image sets it to its copy, `/app/deploy/demo-data`",
    )
    host: str = Field(default="127.0.0.1", description="Address the API (and Flower) bind to")
    port: int = Field(default=8000, ge=1, le=65535, description="Port of the API")
    front: Literal["auto", "nginx", "none"] = Field(
        default="auto",
        description="`make run` (`mapsvc up`) puts nginx before the API to serve cached tiles "
        "from disk: `nginx`, `none`, or `auto` (when nginx is installed)",
    )
    front_access_ttl_s: int = Field(
        default=5,
        ge=0,
        le=300,
        description="How long the front keeps the API's yes to a credential reading a layer's "
        "cached tiles (`0`: asks every time)",
    )
    front_vtile_ttl_s: int = Field(
        default=60,
        ge=0,
        le=3600,
        description="How long the front keeps a vector tile of a public layer (`0`: never); "
        "changes to its table reach clients through the front within this time",
    )
    front_rate_per_s: int = Field(
        default=100,
        ge=0,
        description="Requests a second the front passes to the API from one client address, "
        "whatever the route and credentials (anonymous tiles from its cache aside, which "
        "`MAPSVC_RATE_TILES_PER_MIN` counts): past `MAPSVC_FRONT_BURST` ahead of that pace "
        "they wait their turn in nginx, past `MAPSVC_FRONT_QUEUE` more they get nginx's own "
        "`429` at once, before the API spends any time on them (`0`: no such limit)",
    )
    front_burst: int = Field(
        default=50,
        ge=1,
        description="How far ahead of `MAPSVC_FRONT_RATE_PER_S` one address may be (a viewer's "
        "first screen of tiles) and still be answered at once",
    )
    front_queue: int = Field(
        default=1000,
        ge=0,
        description="Requests of one address beyond `MAPSVC_FRONT_BURST` that the front keeps "
        "waiting, each sent to the API at its turn of `MAPSVC_FRONT_RATE_PER_S` (a client on "
        "that many connections, however fast it asks, is slowed, which costs nothing); past "
        "them, nginx's own `429`",
    )
    front_backend: str | None = Field(
        default=None,
        description="`host:port` of the API that `mapsvc front` passes to; unset: "
        "`127.0.0.1:MAPSVC_BACKEND_PORT` (`api:8000` in `compose.yaml`)",
    )
    _check_backend = field_validator("front_backend")(host_port)
    front_resolver: str | None = Field(
        default=None,
        pattern=r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$",
        description="DNS server (`address[:port]`) nginx asks for the backend's address at "
        "request time, the answer kept 10 s, so a re-created API container is found "
        "(`127.0.0.11`, Docker's, in `compose.yaml`); unset: the backend is looked up once, when "
        "nginx starts, and its connections are kept open",
    )
    backend_port: int = Field(
        default=8001,
        ge=1,
        le=65535,
        description="Port of the API on loopback when the nginx front listens on `MAPSVC_PORT`",
    )
    flower_port: int = Field(default=5555, ge=1, le=65535, description="Port of Flower")
    api_workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="API processes that `mapsvc serve` starts (uvicorn "
        "workers; each has its own render pool)",
    )
    log_level: str = Field(default="INFO", description="Log level of every process")
    log_format: LogFormat = Field(
        default="auto",
        description="Log lines of every process (API, workers, CLI): `json`, one JSON object each "
        "(`time`, `level`, `logger`, `message`, and `request_id`, `job_id` when the line concerns "
        "a request or a job); `text`, plain lines (`<time> <level> <logger> <message> "
        "request=<id> job=<id>`); or `auto`, text when standard error is a terminal (`make run` "
        "in a shell), JSON when it is not (a file, a pipe, a container's log)",
    )
    database_url: str = Field(
        default="postgresql+psycopg://postgres@127.0.0.1:5432/mapsvc",
        description="SQLAlchemy URL of PostgreSQL with PostGIS",
    )
    db_pool_size: int = Field(
        default=5, ge=1, description="Pooled PostgreSQL connections per API process"
    )
    db_max_overflow: int = Field(
        default=5, ge=0, description="Connections opened past the pool size under load"
    )
    db_statements_per_caller: int = Field(
        default=4,
        ge=1,
        description="Requests of one caller (a principal, or an address when anonymous) that "
        "query PostgreSQL at once, per API process; more wait a second, then `429`: no caller "
        "empties the pool",
    )
    db_pool_timeout_s: float = Field(
        default=3.0,
        gt=0,
        description="Longest wait for a free connection; then `503` "
        "(`/ready` has a connection of its own)",
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="Redis: Celery broker and results, job records, event lines. With a "
        "password (production Redis must have one: see "
        "[Operations](operations.md#redis-is-a-trust-boundary)): "
        "`redis://:password@host:6379/0` (`redis://user:password@…` for an ACL user; "
        "percent-encode what is not a letter or digit)",
    )
    public_url: str = Field(
        default="",
        pattern=r"^(https?://[^/?#\s]+[^?#\s]*)?$",
        description="Public base URL (`https://maps.example.org`, with any path prefix a proxy "
        "adds); links in answers start with it; empty: relative links",
    )
    allowed_hosts: CommaList = Field(
        default=("127.0.0.1", "localhost", "::1"),
        description="Comma-separated `Host` names the API answers for (`*.example.org`, `*` for "
        "any); the host of `MAPSVC_PUBLIC_URL` is added; others get `400 invalid-host`",
    )
    languages: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(
            split_commas(
                "en,uk,de,fr,es,it,pt,pl,nl,cs,sk,sl,hr,sr,bg,ro,hu,el,tr,ru,be,lt,lv,et,fi,sv,da,"
                "no,is,ga,ar,he,fa,hi,ja,ko,zh,vi,th,id"
            )
        ),
        description="Comma-separated languages a `lang` may name "
        "(tiles, providers); others are `400`",
    )
    default_lang: str = Field(
        default="en",
        pattern=LANG_PATTERN,
        description="Label language put into tile URLs when a request names "
        "none (one of `MAPSVC_LANGUAGES`)",
    )
    cache_ttl_s: int = Field(
        default=86400,
        ge=1,
        description="How long listing, statistics and metadata answers are cached",
    )
    result_cache_max_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="Byte budget of cached listing, statistics and metadata answers (64 MiB)",
    )
    diag_probe: bool = Field(
        default=False,
        description="Serve `/diag/probe` (the pipeline probe job); off, the route answers `404`",
    )
    check_answers: bool = Field(
        default=False,
        description="Check every JSON answer against the model its route documents for its"
        " status (extra fields refused); one that is not is a `500` (the test suite's mode)",
    )
    tiles: TileSettings
    vector: VectorSettings
    jobs: JobSettings
    metrics: MetricsSettings
    s3: S3Settings
    raster: RasterSettings
    convert: ConvertSettings
    uploads: UploadSettings
    proxy: ProxySettings
    providers: Providers
    sources: SourceSettings
    auth: AuthSettings

    #: The concerns, by attribute.
    concerns: ClassVar[dict[str, type[Concern]]] = {
        "tiles": TileSettings,
        "vector": VectorSettings,
        "jobs": JobSettings,
        "metrics": MetricsSettings,
        "s3": S3Settings,
        "raster": RasterSettings,
        "convert": ConvertSettings,
        "uploads": UploadSettings,
        "proxy": ProxySettings,
        "providers": Providers,
        "sources": SourceSettings,
        "auth": AuthSettings,
    }

    def __init__(self, _env_file: DotenvType | None = ENV_FILE_SENTINEL, **values: Any) -> None:
        for attr, cls in self.concerns.items():
            mine = _take_flat(values, cls)
            if attr in values:
                values[attr] = values[attr].updated(mine)
            else:
                values[attr] = cls(_env_file=_env_file, **mine)  # type: ignore[call-arg]
        super().__init__(_env_file=_env_file, **values)  # type: ignore[call-arg]

    @field_validator("languages")
    @classmethod
    def _check_languages(cls, value: frozenset[str]) -> frozenset[str]:
        bad = sorted(lang for lang in value if not _LANG.match(lang))
        if bad or not value:
            raise ValueError(f"expected comma-separated language tags, got {bad or 'none'}")
        return value

    @model_validator(mode="after")
    def _default_lang_is_allowed(self) -> Settings:
        if self.default_lang not in self.languages:
            raise ValueError(
                f"MAPSVC_DEFAULT_LANG {self.default_lang!r} is not in MAPSVC_LANGUAGES"
            )
        return self

    @model_validator(mode="after")
    def _raster_bucket_has_an_endpoint(self) -> Settings:
        if self.raster.store == "s3" and self.s3.endpoint_url is None:
            raise ValueError(
                "MAPSVC_RASTER_STORE=s3 reads the rasters at MAPSVC_S3_ENDPOINT_URL: set it "
                "(https://s3.<region>.amazonaws.com on AWS)"
            )
        return self

    @property
    def allowed_host_list(self) -> list[str]:
        """The host names of ``MAPSVC_ALLOWED_HOSTS``, and the host of the public URL."""
        hosts = list(self.allowed_hosts)
        public = urlsplit(self.public_url).hostname
        return hosts + ([public] if public else [])

    @property
    def dirs(self) -> WorkDir:
        """The work dir's folders (``settings.dirs.rtile`` is ``<work_dir>/map/rtile``)."""
        return WorkDir(self.work_dir)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied and validated like settings read at start.

        ``update`` names fields by their flat names (``s3_bucket``) or whole concerns
        (``providers``); comma lists may be strings, blanks unset, and the checks across
        fields run again.
        """
        copied = super().model_copy(deep=deep)
        if not update:
            return copied
        values = {**dict(copied), **update}
        for attr, cls in self.concerns.items():
            mine = _take_flat(values, cls)
            if mine:
                values[attr] = values[attr].updated(mine)
        return self.model_validate(values)

    def ensure_work_dir(self) -> None:
        """Create the work dir layout of the spec (section 1) if it is missing."""
        for sub in (self.dirs.raster, self.dirs.rtile, self.dirs.mapnik, self.dirs.dem):
            sub.mkdir(parents=True, exist_ok=True)


def _take_flat(values: dict[str, Any], cls: type[Concern]) -> dict[str, Any]:
    """Remove from ``values`` the fields of concern ``cls`` given by flat name; return them
    by key."""
    prefix = cls.flat_prefix()
    keys = [cls.key(name) for name in cls.model_fields]
    return {key: values.pop(prefix + key) for key in keys if prefix + key in values}


def _variables(concern: Concern) -> Iterator[tuple[str, object]]:
    for name, value in concern:
        if isinstance(value, ProviderSettings):
            for field, item in value:
                if field != "api_key" or name in KEYED_PROVIDERS:
                    yield f"MAPSVC_{name.upper()}_{field.upper()}", item
        elif not isinstance(value, Concern):
            yield concern.variable(name), value


def env_values(settings: Settings) -> dict[str, object]:
    """Every setting by its environment variable name (``MAPSVC_…``), with its value."""
    values = dict(_variables(settings))
    for attr in settings.concerns:
        values.update(_variables(getattr(settings, attr)))
    return values
