"""Service settings, read from ``MAPSVC_*`` environment variables and a ``.env`` file."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

__all__ = [
    "KEYED_PROVIDERS",
    "LANG_PATTERN",
    "ProviderSettings",
    "Providers",
    "Settings",
    "env_values",
]

#: Providers that need a key besides their URL (``MAPSVC_<NAME>_API_KEY``).
KEYED_PROVIDERS = frozenset({"here", "mapbox", "owm"})


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


class ProviderSettings(BaseSettings):
    """One external provider (spec 2.7–2.10, 4.10–4.16), read from ``MAPSVC_<NAME>_*``.

    One instance per provider (see `Providers`): the environment prefix is given when it is
    made, and so are the provider's defaults (passed as init values, which the environment
    and ``.env`` override).
    """

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", frozen=True)

    url: str | None = Field(default=None, description="Base URL; unset: not configured")
    api_key: SecretStr | None = Field(default=None, description="Key, where one is needed")
    cache_ttl_s: int = Field(default=86400, ge=1, description="How long answers are cached")
    rate_per_s: float = Field(default=1.0, gt=0, description="Calls per second at most")

    @field_validator("url", "api_key", mode="before")
    @classmethod
    def _blank(cls, value: object) -> object:
        return blank_is_unset(value)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The environment, then ``.env``, then the per-provider defaults given at init."""
        return env_settings, dotenv_settings, init_settings


def _provider(name: str, **defaults: object) -> Callable[[], ProviderSettings]:
    """The factory of provider ``name``'s settings (prefix ``MAPSVC_<NAME>_``)."""

    def make() -> ProviderSettings:
        return ProviderSettings(_env_prefix=f"MAPSVC_{name.upper()}_", **defaults)  # type: ignore[call-arg, arg-type]

    return make


class Providers(BaseModel):
    """The settings of every external provider, one `ProviderSettings` each."""

    model_config = ConfigDict(frozen=True)

    nominatim: ProviderSettings = Field(default_factory=_provider("nominatim"))
    photon: ProviderSettings = Field(default_factory=_provider("photon", rate_per_s=5.0))
    here: ProviderSettings = Field(
        default_factory=_provider(
            "here", url="https://revgeocode.search.hereapi.com", rate_per_s=5.0
        )
    )
    mapbox: ProviderSettings = Field(
        default_factory=_provider("mapbox", url="https://api.mapbox.com", rate_per_s=10.0)
    )
    osrm: ProviderSettings = Field(
        default_factory=_provider("osrm", cache_ttl_s=3600, rate_per_s=5.0)
    )
    valhalla: ProviderSettings = Field(
        default_factory=_provider("valhalla", cache_ttl_s=3600, rate_per_s=5.0)
    )
    owm: ProviderSettings = Field(
        default_factory=_provider("owm", url="https://api.openweathermap.org", cache_ttl_s=600)
    )
    opentopodata: ProviderSettings = Field(default_factory=_provider("opentopodata"))
    kadastr: ProviderSettings = Field(default_factory=_provider("kadastr", rate_per_s=2.0))

    def named(self, name: str) -> ProviderSettings:
        """The settings of provider ``name`` (a field of this class)."""
        found: ProviderSettings = dict(self)[name]
        return found


class Settings(BaseSettings):
    """Everything a process of the service needs to know about its surroundings."""

    model_config = SettingsConfigDict(
        env_prefix="MAPSVC_", env_file=".env", extra="ignore", frozen=True
    )

    work_dir: Path = Field(default=Path("work"), description="Root of map/raster, map/rtile, …")
    host: str = Field(default="127.0.0.1", description="Address the API binds to")
    port: int = Field(default=8000, ge=1, le=65535, description="Port of the API")
    flower_port: int = Field(default=5555, ge=1, le=65535, description="Port of Flower")
    database_url: str = Field(
        default="postgresql+psycopg://postgres@127.0.0.1:5432/mapsvc",
        description="SQLAlchemy URL of PostgreSQL with PostGIS",
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0", description="Redis: Celery broker, results, events"
    )
    default_lang: str = Field(
        default="en",
        pattern=LANG_PATTERN,
        description="Label language of tile URLs when a request names none",
    )
    cache_ttl_s: int = Field(
        default=86400, ge=1, description="How long listing, stat and info results are cached"
    )
    api_workers: int = Field(
        default=1, ge=1, le=64, description="API processes started by `mapsvc serve` (uvicorn)"
    )
    render_processes: int = Field(
        default=0, ge=0, description="Render processes of each API process (0 = one per CPU)"
    )
    tile_max_size: int = Field(
        default=4096, ge=256, le=16384, description="Largest width or height of a BBOX render"
    )
    tile_max_age_s: int = Field(
        default=3600, ge=0, description="Cache-Control max-age of tile responses"
    )
    vector_schemas: CommaList = Field(
        default=("public",), description="Comma-separated schemas whose geometry tables are layers"
    )
    vector_config: Path | None = Field(
        default=None, description="JSON file of layer aliases, zooms and named queries"
    )
    vector_catalog_ttl_s: int = Field(
        default=60, ge=0, description="How long the catalogue of vector layers is kept"
    )
    vector_statement_timeout_ms: int = Field(
        default=10000, ge=100, description="PostgreSQL statement timeout of API queries"
    )
    geojson_max_features: int = Field(
        default=10000, ge=1, description="Default and largest `limit` of a GeoJSON answer"
    )
    vtile_max_features: int = Field(
        default=20000, ge=1, description="Most features in one vector tile"
    )
    vtile_cache_ttl_s: int = Field(
        default=3600, ge=0, description="How long vector tiles and GeoJSON answers are cached"
    )
    job_wait_s: float = Field(
        default=10.0, ge=0, description="How long a heavy endpoint waits before answering 202"
    )
    job_soft_time_limit_s: int = Field(
        default=3600, ge=1, description="Soft time limit of a job (the task is asked to stop)"
    )
    job_time_limit_s: int = Field(
        default=3900, ge=1, description="Hard time limit of a job (the process is killed)"
    )
    job_max_attempts: int = Field(
        default=2, ge=1, description="Runs of a job whose worker process died, before it fails"
    )
    events_ttl_s: int = Field(
        default=86400, ge=60, description="How long a job's event lines and record are kept"
    )
    events_maxlen: int = Field(default=10000, ge=100, description="Most lines kept per job stream")
    sse_keepalive_s: float = Field(
        default=15.0, gt=0, description="Idle time after which an SSE stream sends a comment"
    )
    worker_concurrency: int = Field(
        default=0, ge=0, description="Worker processes per Celery worker (0 = one per CPU)"
    )
    log_level: str = Field(default="INFO", description="Log level of every process")
    # The Convert helper (spec 4.17): `convertServerAddress` of the spec is this first field.
    convert_server_address: str | None = Field(
        default=None, description="`ip:port` of the Convert gRPC server; unset: no client"
    )
    convert_port: int = Field(
        default=4003, ge=1, le=65535, description="Port `mapsvc convert-server` listens on"
    )
    convert_token: SecretStr | None = Field(
        default=None, description="Access token the Convert server checks and clients send"
    )
    convert_max_message_bytes: int = Field(
        default=536870912, ge=1024, description="Largest gRPC message each way (512 MiB)"
    )
    convert_timeout_s: float = Field(
        default=120.0, gt=0, description="Deadline of a Convert call made by the API"
    )
    # Tiles in S3-compatible object storage (`isS3=1`); unset endpoint: not configured.
    s3_endpoint_url: str | None = Field(
        default=None, description="URL of the S3-compatible endpoint; unset: no object storage"
    )
    s3_bucket: str = Field(
        default="mapsvc-tiles", min_length=3, max_length=63, description="Bucket of the tiles"
    )
    s3_prefix: str = Field(
        default="", description="Folder of the tiles in the bucket (`tiles` = keys `tiles/…`)"
    )
    s3_access_key_id: SecretStr | None = Field(
        default=None, description="Access key; unset: boto3's own credential chain"
    )
    s3_secret_access_key: SecretStr | None = Field(
        default=None, description="Secret key that goes with the access key"
    )
    s3_region: str = Field(default="us-east-1", description="Region used to sign requests")
    s3_addressing_style: Literal["path", "virtual", "auto"] = Field(
        default="path", description="Bucket in the URL path (MinIO, moto) or in the host name"
    )
    # External providers (spec 2.7–2.10, 4.10–4.16): one group of fields per provider.
    # A provider is configured when its URL is set (and its key, where it needs one).
    providers: Providers = Field(
        default_factory=lambda: Providers(), description="One `ProviderSettings` per provider"
    )
    provider_connect_timeout_s: float = Field(
        default=3.0, gt=0, description="Connect timeout of provider calls"
    )
    provider_timeout_s: float = Field(
        default=10.0, gt=0, description="Read/write timeout of provider calls"
    )
    provider_max_connections: int = Field(
        default=100, ge=1, description="Most open connections of the provider client"
    )
    provider_retries: int = Field(
        default=2, ge=0, le=5, description="Retries of a GET on connect errors and 5xx"
    )
    provider_backoff_s: float = Field(
        default=0.2, ge=0, description="First retry delay; doubled on each retry"
    )
    provider_rate_wait_s: float = Field(
        default=10.0, gt=0, description="Longest wait for a provider's rate-limit slot"
    )
    geocode_provider: Literal["nominatim", "photon"] = Field(
        default="nominatim", description="Provider of `geocode`"
    )
    reverse_a_provider: Literal["here", "nominatim", "photon"] = Field(
        default="here", description="Provider of `geocoder_a` of `reverse-geocode`"
    )
    reverse_b_provider: Literal["mapbox", "nominatim", "photon"] = Field(
        default="mapbox", description="Provider of `map` of `reverse-geocode`"
    )
    route_provider: Literal["osrm", "valhalla"] = Field(
        default="osrm", description="Provider of `map-route`"
    )
    height_source: Literal["dem", "opentopodata", "dem+opentopodata"] = Field(
        default="dem", description="Elevation source of `height`"
    )
    opentopodata_dataset: str = Field(
        default="srtm90m", pattern=r"^[A-Za-z0-9_,-]+$", description="Open Topo Data dataset"
    )
    dzk_source: Literal["local", "kadastr", "local+kadastr"] = Field(
        default="local", description="Parcel source of `dzk`"
    )
    parcels_table: str = Field(
        default="parcels",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$",
        description="PostGIS table of land parcels",
    )
    proxy_allow_hosts: CommaList = Field(
        default=(), description="Comma-separated hosts `gis-url-proxy` may fetch (`*.x.org`)"
    )
    proxy_trusted_addresses: CommaList = Field(
        default=(), description="Comma-separated `ip:port` exempt from the private-range check"
    )
    proxy_max_bytes: int = Field(
        default=20 * 1024 * 1024, ge=1024, description="Largest body `gis-url-proxy` relays"
    )
    proxy_timeout_s: float = Field(
        default=30.0, gt=0, description="Longest time of one proxied fetch"
    )
    proxy_max_redirects: int = Field(
        default=5, ge=0, le=20, description="Redirects `gis-url-proxy` follows"
    )

    # -- limits of issue 10 (safe to expose), one group per concern --------------------------
    # [settings: core limits]
    languages: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(
            split_commas(
                "en,uk,de,fr,es,it,pt,pl,nl,cs,sk,sl,hr,sr,bg,ro,hu,el,tr,ru,be,lt,lv,et,fi,sv,da,"
                "no,is,ga,ar,he,fa,hi,ja,ko,zh,vi,th,id"
            )
        ),
        description="Comma-separated label languages a request may name (`lang`); others: 400",
    )
    allowed_hosts: CommaList = Field(
        default=("127.0.0.1", "localhost", "::1"),
        description="Comma-separated `Host` names the API answers (`*.example.org`, `*`: any)",
    )
    render_queue_max: int = Field(
        default=64, ge=1, description="Renders waiting or running per API process; then 503"
    )
    render_max_large: int = Field(
        default=1, ge=1, description="BBOX renders larger than a tile at once per API process"
    )
    render_timeout_s: float = Field(
        default=30.0, gt=0, description="Longest wait for one render; then 503"
    )
    render_warm_up: bool = Field(
        default=True, description="Start the render processes when the API starts, not on first use"
    )
    render_max_pixels: int = Field(
        default=4096 * 4096, ge=65536, description="Largest width x height of a BBOX render"
    )
    # [settings: jobs and streams]
    sse_max_streams: int = Field(
        default=200, ge=1, description="Most SSE streams open at once per API process; then 503"
    )
    sse_max_duration_s: float = Field(
        default=3600.0, gt=0, description="Longest life of one SSE stream (resume: Last-Event-ID)"
    )
    stream_redis_max_connections: int = Field(
        default=250,
        ge=1,
        description="Redis connections per API process for SSE streams and job waits (own pool)",
    )
    stream_redis_wait_s: float = Field(
        default=1.0, gt=0, description="Longest wait for one of those connections; then 503"
    )
    diag_probe: bool = Field(
        default=False, description="Serve `/diag/probe`, the pipeline probe job (off: 404)"
    )
    job_stall_s: float = Field(
        default=900.0,
        gt=0,
        description="A started job with no progress line for this long is ended as failed",
    )
    job_watchdog_interval_s: float = Field(
        default=60.0, gt=0, description="How often a worker's embedded beat ends stalled jobs"
    )
    # [settings: pretile]
    pretile_max_tiles: int = Field(
        default=4_000_000,
        ge=1,
        description="Most tiles of one pre-tiling run, even its whole first zoom (else 422)",
    )
    # [settings: vector and caches]
    public_url: str = Field(
        default="",
        pattern=r"^(https?://[^/?#\s]+[^?#\s]*)?$",
        description="Public base URL (`https://maps.example.org`) of links; unset: relative links",
    )
    vector_cache_max_bytes: int = Field(
        default=256 * 1024 * 1024, ge=0, description="Byte budget of cached GeoJSON and MVT"
    )
    result_cache_max_bytes: int = Field(
        default=64 * 1024 * 1024, ge=0, description="Byte budget of cached listing, stat, info"
    )
    provider_cache_max_bytes: int = Field(
        default=64 * 1024 * 1024, ge=0, description="Byte budget of cached provider answers"
    )
    geojson_max_s: float = Field(
        default=60.0, gt=0, description="Longest time a GeoJSON answer streams, however slow"
    )
    db_pool_size: int = Field(default=5, ge=1, description="Pooled connections per API process")
    db_max_overflow: int = Field(
        default=5, ge=0, description="Connections past the pool size under load"
    )
    db_pool_timeout_s: float = Field(
        default=3.0, gt=0, description="Longest wait for a pooled connection (then 503)"
    )
    geojson_buffer_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=0,
        description="GeoJSON read ahead of the client; a page that fits frees its connection",
    )
    # [settings: uploads, convert, proxy]
    upload_max_bytes: int = Field(
        default=128 * 1024 * 1024, ge=1024, description="Largest request body of `pdf-merge`"
    )
    upload_max_file_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="Largest PDF `pdf-merge` takes, uploaded or named by a work-dir path",
    )
    convert_bind: str = Field(
        default="127.0.0.1",
        description="Address the Convert server binds to (`0.0.0.0` or `::`: all interfaces)",
    )
    convert_max_pending: int = Field(
        default=20,
        ge=0,
        description="Convert calls that may wait for one of the 10 workers; more are refused",
    )
    proxy_content_types: CommaList = Field(
        default=split_commas(
            "image/*,application/json,application/*+json,text/json,application/xml,"
            "application/*+xml,text/xml,application/x-protobuf,"
            "application/vnd.mapbox-vector-tile,text/plain"
        ),
        description="Comma-separated media types `gis-url-proxy` relays (`image/*`, `*+json`)",
    )
    proxy_cors_origins: CommaList = Field(
        default=(),
        description="Comma-separated origins `gis-url-proxy` allows (CORS); `*` any; empty none",
    )
    # [settings: openapi]

    @field_validator(
        "convert_server_address",
        "convert_token",
        "s3_endpoint_url",
        "s3_access_key_id",
        "s3_secret_access_key",
        mode="before",
    )
    @classmethod
    def _blank(cls, value: object) -> object:
        return blank_is_unset(value)

    @field_validator(
        "languages",
        "allowed_hosts",
        "vector_schemas",
        "proxy_allow_hosts",
        "proxy_trusted_addresses",
        "proxy_content_types",
        "proxy_cors_origins",
        mode="before",
    )
    @classmethod
    def _comma_list(cls, value: object) -> object:
        return split_commas(value) if isinstance(value, str) else value

    @field_validator("languages")
    @classmethod
    def _check_languages(cls, value: frozenset[str]) -> frozenset[str]:
        bad = sorted(lang for lang in value if not _LANG.match(lang))
        if bad or not value:
            raise ValueError(f"expected comma-separated language tags, got {bad or 'none'}")
        return value

    @field_validator("convert_server_address")
    @classmethod
    def _check_address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, sep, port = value.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected <ip>:<port>, got {value!r}")
        return value.strip()

    @property
    def allowed_host_list(self) -> list[str]:
        """The host names of ``MAPSVC_ALLOWED_HOSTS``, and the host of the public URL."""
        hosts = list(self.allowed_hosts)
        public = urlsplit(self.public_url).hostname
        return hosts + ([public] if public else [])

    @model_validator(mode="after")
    def _default_lang_is_allowed(self) -> Settings:
        if self.default_lang not in self.languages:
            raise ValueError(
                f"MAPSVC_DEFAULT_LANG {self.default_lang!r} is not in MAPSVC_LANGUAGES"
            )
        return self

    @model_validator(mode="after")
    def _s3_keys_go_together(self) -> Settings:
        if (self.s3_access_key_id is None) != (self.s3_secret_access_key is None):
            raise ValueError(
                "set both MAPSVC_S3_ACCESS_KEY_ID and MAPSVC_S3_SECRET_ACCESS_KEY, or neither"
            )
        return self

    @property
    def raster_dir(self) -> Path:
        """``map/raster``: the source rasters."""
        return self.work_dir / "map" / "raster"

    @property
    def rtile_dir(self) -> Path:
        """``map/rtile``: the tile cache on disk."""
        return self.work_dir / "map" / "rtile"

    @property
    def mapnik_dir(self) -> Path:
        """``map/mapnik``: the Mapnik styles."""
        return self.work_dir / "map" / "mapnik"

    @property
    def derived_dir(self) -> Path:
        """``map/derived``: files built from the rasters (mosaics, builds)."""
        return self.work_dir / "map" / "derived"

    @property
    def dem_dir(self) -> Path:
        """``map/dem``: the local elevation rasters."""
        return self.work_dir / "map" / "dem"

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied and validated like settings read at start.

        Comma lists may be given as strings (``"public,hostile"``), blanks unset, and the
        checks across fields run again.
        """
        copied = super().model_copy(deep=deep)
        return copied if not update else self.model_validate({**dict(copied), **update})

    def ensure_work_dir(self) -> None:
        """Create the work dir layout of the spec (section 1) if it is missing."""
        for sub in (self.raster_dir, self.rtile_dir, self.mapnik_dir, self.dem_dir):
            sub.mkdir(parents=True, exist_ok=True)


def env_values(settings: Settings) -> dict[str, object]:
    """Every setting by its environment variable name (``MAPSVC_…``), with its value."""
    values: dict[str, object] = {}
    for name, value in settings:
        if isinstance(value, Providers):
            for provider, conf in value:
                for field, item in conf:
                    if field == "api_key" and provider not in KEYED_PROVIDERS:
                        continue
                    values[f"MAPSVC_{provider.upper()}_{field.upper()}"] = item
        else:
            values[f"MAPSVC_{name.upper()}"] = value
    return values
