"""Tile archives: MBTiles 1.3 (SQLite) and PMTiles v3 (Protomaps' ``pmtiles`` writer).

Both are written tile by tile into a file that is not yet under its final name (see
:mod:`shared.seeding.export`) and closed with the metadata of the whole export. Tiles come in
the order of PMTiles tile ids (zoom by zoom, each zoom along its Hilbert curve), so the
PMTiles archive is clustered; identical tiles (the empty tiles around a raster, the sea) are
stored once in it, the writer's own deduplication.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from pmtiles.tile import Compression, TileType, zxy_to_tileid
from pmtiles.writer import Writer

from shared.base.grid import TileAddress

__all__ = ["ARCHIVES", "Archive", "ArchiveInfo", "MBTilesArchive", "PMTilesArchive", "open_archive"]

#: the archive formats, by their file extension
ARCHIVES = ("mbtiles", "pmtiles")
_PMTILES_TYPES = {
    "png": TileType.PNG,
    "jpg": TileType.JPEG,
    "webp": TileType.WEBP,
    "mvt": TileType.MVT,
}


#: What an archive says of its tiles, as TileJSON names it (MBTiles' ``metadata`` rows):
#: ``name``, ``format`` (``png``, ``jpg``, ``webp``, ``pbf``), ``bounds`` and ``center`` (lists
#: of numbers), ``minzoom``, ``maxzoom``, and for vector tiles ``vector_layers``.
ArchiveInfo = dict[str, Any]


class Archive(Protocol):
    """An archive being written."""

    def add(self, tile: TileAddress, data: bytes) -> None:
        """Add a tile (in tile id order)."""

    def close(self, info: ArchiveInfo) -> None:
        """Write the metadata and close the file."""

    def abort(self) -> None:
        """Close the file unfinished (it is then removed)."""


class MBTilesArchive:
    """An MBTiles 1.3 file: ``metadata`` (name, value) and ``tiles`` with TMS rows.

    Written without a journal: the file is a temporary one until it is complete.
    """

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.executescript(
            """
            PRAGMA journal_mode = OFF;
            PRAGMA synchronous = OFF;
            PRAGMA application_id = 0x4d504258;
            CREATE TABLE metadata (name text, value text);
            CREATE TABLE tiles (zoom_level integer, tile_column integer, tile_row integer,
                                tile_data blob);
            BEGIN;
            """
        )

    def add(self, tile: TileAddress, data: bytes) -> None:
        """Add a tile, its row counted from the south (TMS)."""
        row = (1 << tile.z) - 1 - tile.y
        self.db.execute("INSERT INTO tiles VALUES (?, ?, ?, ?)", (tile.z, tile.x, row, data))

    def close(self, info: ArchiveInfo) -> None:
        """Write the metadata (numbers and lists as MBTiles spells them), index, close."""
        rows = []
        for name, value in info.items():
            if name == "vector_layers":
                rows.append(("json", json.dumps({"vector_layers": value})))
            elif isinstance(value, list):
                rows.append((name, ",".join(str(v) for v in value)))
            else:
                rows.append((name, str(value)))
        self.db.executemany("INSERT INTO metadata VALUES (?, ?)", rows)
        self.db.execute(
            "CREATE UNIQUE INDEX tile_index ON tiles (zoom_level, tile_column, tile_row)"
        )
        self.db.execute("COMMIT")
        self.db.close()

    def abort(self) -> None:
        """Close the file unfinished."""
        self.db.close()


class PMTilesArchive:
    """A PMTiles v3 archive (its header says MVT tiles are gzipped, images are not)."""

    def __init__(self, path: Path, tile_format: str) -> None:
        self.file: BinaryIO = path.open("wb")
        self.writer = Writer(self.file)  # type: ignore[no-untyped-call]
        # the writer keeps the tiles in a temporary file until the end: beside the archive (the
        # work dir's disk), not in $TMPDIR (perhaps memory)
        self.writer.tile_f.close()
        self.writer.tile_f = tempfile.TemporaryFile(dir=path.parent)
        self.tile_type = _PMTILES_TYPES[tile_format]

    def add(self, tile: TileAddress, data: bytes) -> None:
        """Add a tile (identical bytes are stored once)."""
        tile_id = zxy_to_tileid(tile.z, tile.x, tile.y)
        self.writer.write_tile(tile_id, data)  # type: ignore[no-untyped-call]

    def close(self, info: ArchiveInfo) -> None:
        """Write the header (zooms and bounds), directories and metadata; close the file."""
        w, s, e, n = info["bounds"]
        lon, lat, zoom = info["center"]
        compression = Compression.GZIP if self.tile_type is TileType.MVT else Compression.NONE
        header = {
            "tile_type": self.tile_type,
            "tile_compression": compression,
            "min_lon_e7": round(w * 1e7),
            "min_lat_e7": round(s * 1e7),
            "max_lon_e7": round(e * 1e7),
            "max_lat_e7": round(n * 1e7),
            "center_zoom": zoom,
            "center_lon_e7": round(lon * 1e7),
            "center_lat_e7": round(lat * 1e7),
        }
        try:
            self.writer.finalize(header, dict(info))  # type: ignore[no-untyped-call]
        finally:
            self.file.close()

    def abort(self) -> None:
        """Close the file unfinished (the writer's own temporary file too)."""
        self.writer.tile_f.close()
        self.file.close()


def open_archive(path: Path, archive: str, tile_format: str) -> Archive:
    """A new archive of ``archive`` format (``mbtiles``, ``pmtiles``) at ``path``."""
    if archive == "mbtiles":
        return MBTilesArchive(path)
    return PMTilesArchive(path, tile_format)
