"""Service settings, read from ``MAPSVC_*`` environment variables and a ``.env`` file."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "WORK_SUBDIRS"]

#: Folders of the work dir (spec section 1), created on start.
WORK_SUBDIRS = ("map/raster", "map/rtile", "map/mapnik")


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

    def ensure_work_dir(self) -> None:
        """Create the work dir layout of the spec if it is missing."""
        for sub in WORK_SUBDIRS:
            (self.work_dir / sub).mkdir(parents=True, exist_ok=True)
