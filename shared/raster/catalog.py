"""The raster listing (spec 2.1) and the files that make up a raster layer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from shared.errors import InvalidInputError, NotFoundError, UnprocessableError
from shared.raster.paths import encode_id, is_raster_file, relative, resolve

__all__ = ["COMPRESS_DIR", "layer_files", "list_folder", "listing_signature"]

#: Where compressed copies go, inside the raster's folder (the spec's spelling).
COMPRESS_DIR = "commpress"


def _skipped(name: str) -> bool:
    # hidden entries and the compression output are not rasters of their own
    return name.startswith(".") or name == COMPRESS_DIR


def _holds_rasters(folder: Path) -> bool:
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not _skipped(d)]
        if any(not _skipped(f) and is_raster_file(Path(dirpath, f)) for f in filenames):
            return True
    return False


def _folder(root: Path, folder: str) -> Path:
    path = resolve(root, folder.rstrip("/"))
    if not path.is_dir():
        raise InvalidInputError(f"{folder!r} is not a folder", folder=folder)
    return path


def list_folder(root: Path, mapnik_dir: Path, folder: str) -> dict[str, Any]:
    """The rasters of one folder: its sub-folders that hold rasters, and its raster files.

    Args:
        root: the raster root.
        mapnik_dir: where map configurations are written (for ``islayer``).
        folder: the folder, relative to the root (``""``: the root).

    Returns:
        ``folder`` and ``rows`` of the raster listing object (without ``time``).

    Raises:
        NotFoundError: no such folder.
        InvalidInputError: the folder is a file, or lies outside the root.
    """
    path = _folder(root, folder)
    rows = []
    for entry in sorted(path.iterdir(), key=lambda p: (not p.is_dir(), p.name.lower())):
        if _skipped(entry.name):
            continue
        try:
            rel = relative(root, entry.resolve())
        except ValueError:
            continue  # a symlink leading outside the raster root
        if entry.is_dir() and _holds_rasters(entry):
            kind, name = "dir", entry.name
        elif is_raster_file(entry):
            kind, name = "file", entry.stem
        else:
            continue
        raster_id = encode_id(rel)
        rows.append(
            {
                "id": raster_id,
                "name": name,
                "islayer": (mapnik_dir / f"{raster_id}.xml").is_file(),
                "filename": entry.name,
                "path": rel,
                "type": kind,
            }
        )
    return {"folder": relative(root, path), "rows": rows}


def listing_signature(root: Path, mapnik_dir: Path, folder: str) -> list[Any]:
    """What the listing of ``folder`` depends on: its entries' sizes and mtimes, and configs."""
    path = _folder(root, folder)
    entries = []
    for entry in os.scandir(path):
        st = entry.stat(follow_symlinks=False)
        entries.append((entry.name, st.st_size, st.st_mtime_ns))
    return [str(path), os.stat(path).st_mtime_ns, sorted(entries), os.stat(mapnik_dir).st_mtime_ns]


def layer_files(root: Path, rel_path: str) -> list[Path]:
    """The raster files a layer is made of: the file itself, or the rasters in the folder.

    Raises:
        NotFoundError: nothing at the path.
        UnprocessableError: the path is not a raster, or the folder holds none.
    """
    path = resolve(root, rel_path)
    if path.is_file():
        if not is_raster_file(path):
            raise UnprocessableError(f"{rel_path!r} is not a GeoTIFF or VRT", path=rel_path)
        return [path]
    files = sorted(p for p in path.iterdir() if not _skipped(p.name) and is_raster_file(p))
    if not files:
        raise NotFoundError(f"the folder {rel_path!r} holds no raster files", path=rel_path)
    return files
