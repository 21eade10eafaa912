"""Raster ids and paths: every path is resolved inside the raster root, or refused.

A raster id is the URL-safe base64 of the raster's path relative to ``<workDir>/map/raster``
(spec 2.1), without ``=`` padding (padding is accepted on input).
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path, PurePosixPath

from shared.errors import InvalidInputError, NotFoundError
from shared.paths import resolve_inside
from shared.workdir import WorkDir

__all__ = [
    "RASTER_LAYER_EXAMPLE",
    "HEAD_BYTES",
    "RASTER_SUFFIXES",
    "decode_id",
    "encode_id",
    "file_of_layer",
    "is_raster_file",
    "looks_like_raster",
    "normalise_path",
    "raster_root",
    "relative",
    "resolve",
]

#: the id of a raster layer in examples: the demo's single/RGB.byte.tif
RASTER_LAYER_EXAMPLE = "c2luZ2xlL1JHQi5ieXRlLnRpZg"

#: File suffixes taken for rasters (checked against the file's first bytes as well).
RASTER_SUFFIXES = (".tif", ".tiff", ".vrt")
#: Longest raster path (UTF-8 bytes): its id names files (``<id>.xml``, a tile folder), and a
#: file name has at most 255 bytes; 180 bytes of path make an id of 240 characters.
MAX_PATH_BYTES = 180
MAX_ID_CHARS = 4 * -(-MAX_PATH_BYTES // 3)
_TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")


def raster_root(work_dir: Path) -> Path:
    """The folder of source rasters, ``<workDir>/map/raster``."""
    return WorkDir(work_dir).raster


def encode_id(rel_path: str) -> str:
    """The id of the raster at ``rel_path`` (relative to the raster root)."""
    return base64.urlsafe_b64encode(rel_path.encode()).decode().rstrip("=")


def normalise_path(rel_path: str) -> str:
    """The one spelling of a raster path: ``./x``, ``x//y``, ``x/`` become ``x``, ``x/y``.

    Raises:
        InvalidInputError: the path is empty (the raster root), has ``..``, a backslash or a
            NUL, or is longer than :data:`MAX_PATH_BYTES`.
    """
    if "\x00" in rel_path or "\\" in rel_path:
        raise InvalidInputError("a raster path has no backslash or NUL", path=rel_path[:64])
    parts = [part for part in rel_path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise InvalidInputError("a raster path has no '..'", path=rel_path[:64])
    if not parts:
        raise InvalidInputError(
            "a raster path names a file or folder inside the raster folder, not the folder itself",
            path=rel_path[:64],
        )
    normal = "/".join(parts)
    if len(normal.encode()) > MAX_PATH_BYTES:
        raise InvalidInputError(
            f"a raster path has at most {MAX_PATH_BYTES} bytes", path=normal[:64]
        )
    return normal


def decode_id(raster_id: str) -> str:
    """The relative path an id stands for; each raster has one id, that of its normal path.

    Raises:
        InvalidInputError: the id is too long, not URL-safe base64 of a UTF-8 path, or its
            path is not in normal form (:func:`normalise_path`).
    """
    if not raster_id or len(raster_id.rstrip("=")) > MAX_ID_CHARS:
        raise InvalidInputError(
            f"a raster id is URL-safe base64 of a path of at most {MAX_PATH_BYTES} bytes",
            id=raster_id[:64],
        )
    try:
        raw = base64.urlsafe_b64decode(raster_id + "=" * (-len(raster_id) % 4))
        if encode_id(raw.decode()) != raster_id.rstrip("="):
            raise ValueError("not canonical base64")
        rel = raw.decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidInputError(
            "a raster id is URL-safe base64 of a path", id=raster_id[:64]
        ) from None
    normal = normalise_path(rel)
    if normal != rel:
        raise InvalidInputError(
            f"not the id of a raster path in normal form; its id is {encode_id(normal)}",
            id=raster_id[:64],
        )
    return rel


def file_of_layer(layer_path: str, file: str) -> str:
    """The normal path of ``file``, a raster of the layer at ``layer_path`` (the layer's own
    file, or one in its folder); only the path is looked at, not the store.

    Raises:
        InvalidInputError: ``file`` is not a path relative to the raster root
            (:func:`normalise_path`; absolute paths too).
        NotFoundError: the file lies outside the layer (the message names the layer only).
    """
    if file.startswith("/"):
        raise InvalidInputError("a raster path is relative to the raster folder", path=file[:64])
    normal = normalise_path(file)
    if normal != layer_path and not normal.startswith(f"{layer_path}/"):
        layer = encode_id(layer_path)
        raise NotFoundError(f"the file is not one of layer {layer}", parameter="file", layer=layer)
    return normal


def resolve(root: Path, rel_path: str, *, must_exist: bool = True) -> Path:
    """The path ``rel_path`` stands for inside ``root``; never a path outside it.

    Args:
        root: the folder every path must stay in.
        rel_path: a path relative to it (``""`` is the root itself).
        must_exist: raise NotFoundError when nothing is there.

    Raises:
        InvalidInputError: the path is absolute, has ``..``, or leads outside (symlinks too).
        NotFoundError: nothing exists at the path.
    """
    return resolve_inside(root, rel_path, root_name="raster folder", must_exist=must_exist)


def relative(root: Path, path: Path) -> str:
    """``path`` relative to ``root``, with ``/`` separators (``""`` for the root itself)."""
    rel = path.relative_to(root.resolve()).as_posix()
    return "" if rel == "." else rel


#: How many first bytes of a file :func:`looks_like_raster` looks at.
HEAD_BYTES = 64


def is_raster_file(path: Path) -> bool:
    """Whether ``path`` is a GeoTIFF or VRT by its suffix and its first bytes."""
    if path.suffix.lower() not in RASTER_SUFFIXES or not path.is_file():
        return False
    try:
        with path.open("rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return False
    return looks_like_raster(path.name, head)


def looks_like_raster(name: str, head: bytes) -> bool:
    """Whether a file called ``name`` whose first bytes are ``head`` is a GeoTIFF or VRT.

    Args:
        name: the file's name (its suffix must be one of :data:`RASTER_SUFFIXES`).
        head: its first :data:`HEAD_BYTES` bytes (fewer for a shorter file).
    """
    suffix = PurePosixPath(name).suffix.lower()
    if suffix not in RASTER_SUFFIXES:
        return False
    if suffix == ".vrt":
        return head.lstrip().startswith(b"<VRTDataset")
    return head[:4] in _TIFF_MAGIC
