"""The tile caches of a process, built from its settings (the API and the workers alike)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.base.s3 import connection_options
from shared.errors import UnavailableError
from shared.settings import Settings
from shared.tiles.s3 import S3TileStore
from shared.tiles.store import FileTileStore, TileStore

__all__ = ["TileStores", "s3_store", "tile_stores"]

_NOT_CONFIGURED = "object storage is not configured (MAPSVC_S3_* settings)"


@dataclass(frozen=True)
class TileStores:
    """The file cache, and the object storage cache when it is configured."""

    file: FileTileStore
    s3: S3TileStore | None

    def pick(self, s3: bool) -> TileStore:
        """The object storage cache when ``s3`` (the ``isS3`` flag), else the file cache.

        Raises:
            UnavailableError: ``s3`` and object storage is not configured.
        """
        if not s3:
            return self.file
        if self.s3 is None:
            raise UnavailableError(_NOT_CONFIGURED)
        return self.s3

    def all(self) -> list[TileStore]:
        """Every configured store (a rebuilt style is dropped from each)."""
        return [self.file] if self.s3 is None else [self.file, self.s3]

    def close(self) -> None:
        """Close the object storage client."""
        if self.s3 is not None:
            self.s3.close()

    def __enter__(self) -> TileStores:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def s3_store(settings: Settings) -> S3TileStore:
    """The object storage cache the settings name; no request is sent.

    Args:
        settings: the ``s3_*`` settings; object storage is configured when
            ``s3_endpoint_url`` is set.

    Returns:
        A new store with a client of its own; close it when done.

    Raises:
        UnavailableError: object storage is not configured.
    """
    if settings.s3.endpoint_url is None:
        raise UnavailableError(_NOT_CONFIGURED)
    return S3TileStore(
        bucket=settings.s3.bucket, prefix=settings.s3.prefix, **connection_options(settings.s3)
    )


def tile_stores(settings: Settings) -> TileStores:
    """The tile caches the settings name; no request is sent.

    Args:
        settings: ``work_dir`` for the file cache; the ``s3_*`` settings for object storage,
            configured when ``s3_endpoint_url`` is set.

    Returns:
        The stores; close them (or use them as a context manager) when done.
    """
    s3 = s3_store(settings) if settings.s3.endpoint_url is not None else None
    return TileStores(file=FileTileStore(settings.dirs.rtile), s3=s3)
