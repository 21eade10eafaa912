"""The vector tiles the nginx front keeps (``MAPSVC_FRONT_VTILE_TTL_S``), found and removed by tile.

nginx keeps an answer as a file of its ``proxy_cache_path`` (``levels=1:2``: ``<c>/<cc>/<32 hex
digits>``): a binary header, then ``\\nKEY: <key>\\n``, the answer's headers and its body. The
front's key starts with the request's normalised path (``$uri|…``), so a file's tile is read
from its key by the patterns of the front's vector tile locations, which the API gives (it
declares them: ``api.front``), whatever the mount, the ``Accept-Encoding`` or the ``Origin``
the answer was kept for.

An answer is dropped by marking it expired, not by removing its file: its header's
``valid_sec`` (nginx's ``ngx_http_file_cache_header_t``, version 5 since nginx 1.9, after an
8-byte version on 64-bit hosts) is set to 0, so the next request is nginx's ``EXPIRED``: it asks
the API and keeps the new answer, and nginx removes the file itself when its ``inactive`` time
ends. A removed file would be a miss too, but nginx would then log a critical
``unlink() … failed (2: No such file or directory)`` when it forgets the entry. A file of
another header layout is removed. Symbolic links in the folder (nginx makes none) are not
followed: what they lead to is not the front's.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import struct
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path

from shared.base.grid import TileAddress

__all__ = ["Known", "drop_front_tiles"]

log = logging.getLogger(__name__)

#: bytes read of a kept file: nginx's header (about 340 bytes) and the key after it
_HEAD_BYTES = 4096
_KEY = b"\nKEY: "
#: the header's first field, the cache's version (5), as a 64-bit host writes it; then valid_sec
_VERSION = struct.pack("=Q", 5)
_VALID_SEC = struct.Struct("=q")
_FILE = re.compile(r"^[0-9a-f]{32}$")
_LEVELS = (re.compile(r"^[0-9a-f]$"), re.compile(r"^[0-9a-f]{2}$"))


def _folders(folder: Path, level: re.Pattern[str]) -> list[Path]:
    with os.scandir(folder) as entries:
        return [
            Path(e.path) for e in entries if level.match(e.name) and e.is_dir(follow_symlinks=False)
        ]


def _files(folder: Path) -> Iterator[Path]:
    """The kept files of the cache ``folder`` (nginx's temporary files left out)."""
    for one in _folders(folder, _LEVELS[0]):
        for two in _folders(one, _LEVELS[1]):
            with os.scandir(two) as entries:
                names = [
                    e.path
                    for e in entries
                    if _FILE.match(e.name) and e.is_file(follow_symlinks=False)
                ]
            yield from map(Path, names)


def _head(path: Path) -> bytes:
    """The first bytes of a kept file (none when it is gone meanwhile)."""
    try:
        with open(path, "rb") as f:
            return f.read(_HEAD_BYTES)
    except FileNotFoundError:
        return b""


def _tile_of(head: bytes, patterns: Sequence[re.Pattern[str]]) -> tuple[str, TileAddress] | None:
    """The layer name and tile whose answer a kept file keeps, from its first bytes ``head``;
    None: another answer."""
    start = head.find(_KEY)
    end = head.find(b"\n", start + len(_KEY)) if start >= 0 else -1
    if end < 0:
        return None
    uri = head[start + len(_KEY) : end].decode("utf-8", "replace").split("|", 1)[0]
    for pattern in patterns:
        found = pattern.match(uri)
        if found is not None:
            tile = TileAddress(int(found["z"]), int(found["x"]), int(found["y"]))
            return found["vlayer"], tile
    return None


def _expire(path: Path, versioned: bool) -> bool:
    """Mark a kept answer expired (see the module's notes; a file of another header layout
    than ``versioned`` is removed); False when it is gone."""
    try:
        if not versioned:
            path.unlink()
            return True
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link put in its place meanwhile: not the front's
            return False
        raise
    try:
        os.pwrite(fd, _VALID_SEC.pack(0), len(_VERSION))
    finally:
        os.close(fd)
    return True


#: what a kept file holds, by its path: a file's name is the MD5 of its key, so a path always
#: keeps the same request's answer (the layer name and tile of its path, or None for another
#: answer) in the same header layout
Known = dict[Path, tuple[str, TileAddress, bool] | None]


def drop_front_tiles(
    folder: Path,
    patterns: Sequence[str],
    layer_id: str,
    wanted: Callable[[TileAddress], bool],
    *,
    aliases: Collection[str] = (),
    known: Known | None = None,
) -> list[TileAddress] | None:
    """Expire the front's kept answers of the tiles of a layer that ``wanted`` picks.

    Every kept file is read (its first 4 kB): the work is the front's cache, at most its
    ``max_size`` and only the answers asked within its ``inactive`` time. A caller that expires
    often (the follower of watched layers) passes ``known``: a file read once is not read
    again, only listed (the paths gone are forgotten).

    Args:
        folder: the front's ``proxy_cache_path`` of vector tiles.
        patterns: regular expressions of the front's vector tile paths, with the groups
            ``vlayer``, ``z``, ``x`` and ``y``.
        layer_id: the vector layer's id.
        wanted: whether a kept tile is to go.
        aliases: the layer's other names (the front keeps a tile per name it was asked by).

    Returns:
        The tiles expired (one per answer kept: plain and gzip are two); None when the folder
        cannot be read or written by this process (its answers then end with their TTL).
    """
    compiled = [re.compile(p) for p in patterns]
    names = {layer_id, *aliases}
    dropped: list[TileAddress] = []
    seen: set[Path] = set()
    try:
        for path in _files(folder):
            seen.add(path)
            if known is not None and path in known:
                kept = known[path]
            else:
                head = _head(path)
                found = _tile_of(head, compiled)
                kept = None if found is None else (*found, head.startswith(_VERSION))
                if known is not None and head:
                    known[path] = kept
            if kept is None:
                continue
            name, tile, versioned = kept
            if name in names and wanted(tile) and _expire(path, versioned):
                dropped.append(tile)
    except FileNotFoundError:
        return dropped  # no front has kept anything here
    except PermissionError as exc:
        log.warning("the front's vector tiles in %s cannot be removed: %s", folder, exc)
        return None
    finally:
        if known is not None:
            for gone in known.keys() - seen:
                del known[gone]
    return dropped
