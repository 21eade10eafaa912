"""The tile cache: ``<style>/<lang>/<z>/<x>/<y>[@2x].<ext>`` keys, on disk or in object storage."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Protocol

from shared.raster.files import write_atomic
from shared.tiles.formats import PNG_TILE, TileFormat, TileVariant
from shared.tiles.grid import TileAddress
from shared.tiles.styles import check_style_id

__all__ = ["FileTileStore", "TileStore", "key_format", "tile_key"]


def tile_key(style: str, lang: str, tile: TileAddress, variant: TileVariant = PNG_TILE) -> str:
    """The cache key of a tile, the same on disk and in a bucket.

    ``<style>/<lang>/<z>/<x>/<y>.png`` for a PNG (the keys of every tile before other formats),
    and beside it ``<y>.webp``, ``<y>.jpg``, ``<y>@2x.png``, … for the other variants.
    """
    return f"{style}/{lang}/{tile.z}/{tile.x}/{tile.y}{variant.suffix}"


def key_format(key: str) -> TileFormat:
    """The format of the tile stored under ``key`` (from its extension)."""
    return TileFormat.from_extension(key.rpartition(".")[2])


class TileStore(Protocol):
    """Where rendered tiles are kept."""

    def get(self, key: str) -> bytes | None:
        """The tile stored under ``key``, or None."""

    def put(self, key: str, data: bytes) -> None:
        """Store a tile; a reader sees the whole tile or none."""

    def exists(self, key: str) -> bool:
        """Whether a tile is stored under ``key``."""

    def drop_style(self, style: str) -> None:
        """Forget every tile of a style (refusing a name that is not a style id)."""


class FileTileStore:
    """Tiles as files under ``<workDir>/map/rtile``, written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str) -> bytes | None:
        """The tile stored under ``key``, or None."""
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes) -> None:
        """Store a tile (temporary file, then rename)."""
        write_atomic(self._path(key), data)

    def exists(self, key: str) -> bool:
        """Whether a tile is stored under ``key``."""
        return self._path(key).is_file()

    def drop_style(self, style: str) -> None:
        """Remove the style's folder of tiles, and nothing else.

        Raises:
            InvalidInputError: ``style`` is not a style id (it could name the whole cache).
        """
        shutil.rmtree(self.root / check_style_id(style), ignore_errors=True)
