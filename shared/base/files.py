"""Writing files safely: a temporary name in the same folder, then an atomic rename."""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "link_atomic", "write_atomic"]


@contextlib.contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """A temporary path beside ``final``; renamed to it when the block ends without error.

    On an error (or a cancelled job) the temporary file is removed: nothing half-written ever
    has the final name.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(final)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        for leftover in (
            tmp,
            tmp.with_name(tmp.name + ".ovr"),
            tmp.with_name(tmp.name + ".aux.xml"),
        ):
            leftover.unlink(missing_ok=True)


def _temporary(final: Path) -> Path:
    """A name beside ``final`` for a file on its way there."""
    return final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}.tmp")


def link_atomic(source: Path, final: Path, data: bytes) -> os.stat_result | None:
    """``final`` made another name of the file ``source`` (a hard link under a temporary name,
    then a rename; its folder made when missing) when that file holds ``data``: its status;
    None, and nothing changed, when it cannot be (``source`` gone or replaced by other bytes
    meanwhile, a file system without hard links).

    Made for a tile cache's tiles of one colour: a link is a directory entry where a new file
    is an inode too. What the link leads to is read back before the rename, so ``final`` never
    holds bytes other than ``data``; the files of a cache are only ever replaced by a rename,
    never written in place, so it stays so.
    """
    tmp = _temporary(final)
    try:
        try:
            os.link(source, tmp, follow_symlinks=False)
        except FileNotFoundError:
            if not source.is_file():
                return None
            final.parent.mkdir(parents=True, exist_ok=True)
            os.link(source, tmp, follow_symlinks=False)
    except OSError:
        return None
    try:
        # a regular file, never through a symbolic link (a link to one is one: the name would
        # lead elsewhere), nor a FIFO's wait for a writer
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, "rb") as f:
            status = os.fstat(fd)
            same = stat.S_ISREG(status.st_mode) and f.read(len(data) + 1) == data
        if same:
            os.replace(tmp, final)
            # a rename onto another name of the same file does nothing: the name is left
            tmp.unlink(missing_ok=True)
            return status
    except OSError:
        pass
    tmp.unlink(missing_ok=True)
    return None


def write_atomic(final: Path, data: str | bytes) -> os.stat_result:
    """Write ``data`` to ``final`` atomically (a temporary file beside it, then a rename): the
    file's status (its size and modification time, which the rename keeps).

    Made for the many small files of a tile cache: one open, write and rename a file, its folder
    made only when it is missing; on an error the temporary file is removed.
    """
    raw = data.encode() if isinstance(data, str) else data
    tmp = _temporary(final)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(tmp, flags, 0o666)
    except FileNotFoundError:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, flags, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            status = os.fstat(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return status
