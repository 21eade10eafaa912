"""The tile cache: ``<style>/<lang>/<z>/<x>/<y>[@2x].<ext>`` keys, on disk or in object storage."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from shared.base.files import link_atomic, write_atomic
from shared.base.formats import PNG_TILE, TileFormat, TileVariant
from shared.base.grid import TileAddress
from shared.raster.rendering import Rendering
from shared.tiles.styles import check_style_id

__all__ = [
    "STALE_WRITE_S",
    "FileTileStore",
    "StoredTile",
    "TileStore",
    "etag_of",
    "file_etag",
    "key_format",
    "rendering_folder",
    "tile_key",
]


@dataclass(frozen=True)
class StoredTile:
    """A tile's bytes as stored, and the strong ETag they are served with."""

    data: bytes
    etag: str


def etag_of(data: bytes) -> str:
    """A strong ETag of a tile's bytes (each format and scale has its own bytes, so its own)."""
    return '"' + hashlib.blake2b(data, digest_size=16).hexdigest() + '"'


def file_etag(stat: os.stat_result) -> str:
    """The ETag nginx gives a file (its modification time in seconds and its size, in hex), so
    that a tile has one ETag whether the front or the API sends it."""
    return f'"{int(stat.st_mtime):x}-{stat.st_size:x}"'


def rendering_folder(rendering: Rendering | None) -> str:
    """What a tile drawn with ``rendering`` adds to its language's folder: ``~<key>``, the key
    of the canonical parameters (nothing for none, or parameters that choose nothing)."""
    return f"~{rendering.key}" if rendering is not None and not rendering.empty else ""


def tile_key(
    style: str,
    lang: str,
    tile: TileAddress,
    variant: TileVariant = PNG_TILE,
    rendering: Rendering | None = None,
) -> str:
    """The cache key of a tile, the same on disk and in a bucket.

    ``<style>/<lang>/<z>/<x>/<y>.png`` for a PNG (the keys of every tile before other formats),
    and beside it ``<y>.webp``, ``<y>.jpg``, ``<y>@2x.png``, … for the other variants. A tile
    drawn with rendering parameters of a request is kept under ``<style>/<lang>~<key>/…``
    (:func:`rendering_folder`): dropped with its layer, apart from its own tiles.
    """
    folder = lang + rendering_folder(rendering)
    return f"{style}/{folder}/{tile.z}/{tile.x}/{tile.y}{variant.suffix}"


def key_format(key: str) -> TileFormat:
    """The format of the tile stored under ``key`` (from its extension)."""
    return TileFormat.from_extension(key.rpartition(".")[2])


class TileStore(Protocol):
    """Where rendered tiles are kept."""

    def get(self, key: str) -> bytes | None:
        """The tile stored under ``key``, or None."""

    def read(self, key: str) -> StoredTile | None:
        """The tile stored under ``key`` with its ETag, or None."""

    def put(self, key: str, data: bytes, like: str | None = None) -> str:
        """Store a tile; a reader sees the whole tile or none. Its ETag.

        ``like``: the key of a tile just stored with the same bytes (a tile of one colour): a
        store that can may make ``key`` another name of it instead of writing the bytes again.
        """

    def exists(self, key: str) -> bool:
        """Whether a tile is stored under ``key``."""

    def modified(self, key: str) -> float | None:
        """When the tile stored under ``key`` was written (POSIX seconds), or None."""

    def drop_style(self, style: str) -> None:
        """Forget every tile of a style (refusing a name that is not a style id)."""

    def names(self, folder: str) -> list[str]:
        """The names in the folder of keys ``folder`` (``<style>/<lang>/<z>``, …): its tiles
        and sub-folders; none when it is missing."""

    def delete_many(self, keys: list[str]) -> int:
        """Remove the tiles stored under ``keys``; how many were stored."""


#: a temporary file of a tile write this old was left by a process that died
STALE_WRITE_S = 3600


def _sweep(folder: Path, writes: list[str]) -> None:
    """Remove the temporary files ``writes`` of ``folder`` older than :data:`STALE_WRITE_S`."""
    now = time.time()
    for name in writes:
        with contextlib.suppress(FileNotFoundError):
            if now - (folder / name).stat().st_mtime > STALE_WRITE_S:
                (folder / name).unlink()


class FileTileStore:
    """Tiles as files under ``<workDir>/map/rtile``, written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str) -> bytes | None:
        """The tile stored under ``key``, or None."""
        stored = self.read(key)
        return None if stored is None else stored.data

    def read(self, key: str) -> StoredTile | None:
        """The tile stored under ``key`` with the ETag nginx gives its file, or None."""
        try:
            with open(self._path(key), "rb") as f:
                return StoredTile(f.read(), file_etag(os.fstat(f.fileno())))
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes, like: str | None = None) -> str:
        """Store a tile (temporary file, then rename); the ETag nginx gives its file.

        With ``like``, the tile's file is a hard link to the file of ``like`` when it still holds
        ``data`` (as MapProxy's ``link_single_color_images``, with symbolic links, saves a file
        per tile of the sea).
        Both then share a modification time, that of ``like``'s writing, moments before.
        """
        path = self._path(key)
        status = None if like is None else link_atomic(self._path(like), path, data)
        if status is None:
            status = write_atomic(path, data)
        return file_etag(status)

    def exists(self, key: str) -> bool:
        """Whether a tile is stored under ``key``."""
        return self._path(key).is_file()

    def modified(self, key: str) -> float | None:
        """When the tile stored under ``key`` was written (its file's mtime), or None."""
        try:
            return self._path(key).stat().st_mtime
        except FileNotFoundError:
            return None

    def drop_style(self, style: str) -> None:
        """Remove the style's folder of tiles, and nothing else.

        Raises:
            InvalidInputError: ``style`` is not a style id (it could name the whole cache).
        """
        shutil.rmtree(self.root / check_style_id(style), ignore_errors=True)

    def names(self, folder: str) -> list[str]:
        """The names in the folder of keys ``folder`` (none when it is missing).

        A folder that a symbolic link leads out of its style's folder (into another layer's
        tiles, say) has none: truncation and expiry walk these names, and must remove or draw
        again only the style's own tiles. The temporary file of a write (``.<name>.<hex>.tmp``)
        is no name; one older than :data:`STALE_WRITE_S`, left by a process killed while it
        wrote, is removed on the way.
        """
        path = self._path(folder)
        style = os.path.realpath(self._path(folder.split("/", 1)[0]))
        real = os.path.realpath(path)
        if real != style and not real.startswith(style + os.sep):
            return []
        try:
            names = os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        writes = [name for name in names if name.startswith(".") and name.endswith(".tmp")]
        if writes:
            _sweep(path, writes)
        return [name for name in names if not name.startswith(".")]

    def delete_many(self, keys: list[str]) -> int:
        """Remove the files of ``keys`` (their folders stay); how many there were."""
        removed = 0
        for key in keys:
            try:
                os.unlink(self._path(key))
                removed += 1
            except FileNotFoundError:
                pass  # removed meanwhile
        return removed
