"""The raster listing (spec 2.1) and the files that make up a raster layer, in any store."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

from shared.errors import InvalidInputError, NotFoundError, UnprocessableError
from shared.raster.paths import HEAD_BYTES, RASTER_SUFFIXES, encode_id, looks_like_raster
from shared.raster.store import RasterStore, StoredItem

__all__ = ["COMPRESS_DIR", "is_raster", "layer_files", "list_folder", "listing_signature"]

#: Where compressed copies go, inside the raster's folder (the spec's spelling).
COMPRESS_DIR = "commpress"


def _skipped(name: str) -> bool:
    # hidden entries and the compression output are not rasters of their own
    return name.startswith(".") or name == COMPRESS_DIR


def is_raster(rasters: RasterStore, item: StoredItem) -> bool:
    """Whether ``item`` is a GeoTIFF or VRT, by its suffix and its first bytes."""
    if item.is_dir or PurePosixPath(item.name).suffix.lower() not in RASTER_SUFFIXES:
        return False  # the suffix rules most files out before a byte of them is read
    return looks_like_raster(item.name, rasters.head(item, HEAD_BYTES))


def _holds_rasters(rasters: RasterStore, folder: StoredItem, seen: set[str]) -> bool:
    """Whether a raster lies in ``folder`` or below (hidden and ``commpress`` folders aside)."""
    if folder.rel_path in seen:  # a symlink back up the tree
        return False
    seen.add(folder.rel_path)
    entries = [e for e in rasters.children(folder.rel_path) if not _skipped(e.name)]
    if any(is_raster(rasters, e) for e in entries if not e.is_dir):
        return True
    return any(_holds_rasters(rasters, e, seen) for e in entries if e.is_dir)


def _folder(rasters: RasterStore, folder: str) -> StoredItem:
    item = rasters.item(folder.rstrip("/"))
    if not item.is_dir:
        raise InvalidInputError(f"{folder!r} is not a folder", folder=folder)
    return item


def list_folder(rasters: RasterStore, mapnik_dir: Path, folder: str) -> dict[str, Any]:
    """The rasters of one folder: its sub-folders that hold rasters, and its raster files.

    Args:
        rasters: the raster store.
        mapnik_dir: where map configurations are written (for ``islayer``).
        folder: the folder, relative to the store's root (``""``: the root).

    Returns:
        ``folder`` and ``rows`` of the raster listing object (without ``time``).

    Raises:
        NotFoundError: no such folder.
        InvalidInputError: the folder is a file, or lies outside the root.
        UnavailableError: the object storage cannot be reached.
    """
    item = _folder(rasters, folder)
    rows = []
    entries = rasters.children(item.rel_path)
    for entry in sorted(entries, key=lambda e: (not e.is_dir, e.name.lower())):
        if _skipped(entry.name):
            continue
        if entry.is_dir and _holds_rasters(rasters, entry, set()):
            kind, name = "dir", entry.name
        elif is_raster(rasters, entry):
            kind, name = "file", entry.stem
        else:
            continue
        raster_id = encode_id(entry.rel_path)
        rows.append(
            {
                "id": raster_id,
                "name": name,
                "islayer": (mapnik_dir / f"{raster_id}.xml").is_file(),
                "filename": entry.name,
                "path": entry.rel_path,
                "type": kind,
            }
        )
    return {"folder": item.rel_path, "rows": rows}


def listing_signature(rasters: RasterStore, mapnik_dir: Path, folder: str) -> list[Any]:
    """What the listing of ``folder`` depends on: its entries' sizes and versions, and configs.

    The versions are mtimes on a file system, ETags in a bucket.
    """
    item = _folder(rasters, folder)
    entries = sorted(
        (e.name, e.is_dir, e.size or 0, str(e.version)) for e in rasters.children(item.rel_path)
    )
    return [rasters.describe(), item.signature, entries, os.stat(mapnik_dir).st_mtime_ns]


def layer_files(rasters: RasterStore, rel_path: str) -> list[StoredItem]:
    """The raster files a layer is made of: the file itself, or the rasters in the folder.

    Raises:
        NotFoundError: nothing at the path.
        UnprocessableError: the path is not a raster, or the folder holds none.
        UnavailableError: the object storage cannot be reached.
    """
    item = rasters.item(rel_path)
    if not item.is_dir:
        if not is_raster(rasters, item):
            raise UnprocessableError(f"{rel_path!r} is not a GeoTIFF or VRT", path=rel_path)
        return [item]
    files = sorted(
        (
            e
            for e in rasters.children(item.rel_path)
            if not _skipped(e.name) and is_raster(rasters, e)
        ),
        key=lambda e: e.name,
    )
    if not files:
        raise NotFoundError(f"the folder {rel_path!r} holds no raster files", path=rel_path)
    return files
