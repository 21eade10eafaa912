"""Free space: long jobs that write (exports, seeds into the disk cache) stop, with a clear job
error, before the disk under the work dir fills up (``MAPSVC_MIN_FREE_DISK_BYTES``)."""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["short_of_space"]


def short_of_space(path: Path, keep_free: int) -> str | None:
    """Why the disk of ``path`` (or of its nearest folder that exists) cannot take more: it has
    less than ``keep_free`` bytes free. None: it has enough."""
    while not path.exists() and path != path.parent:
        path = path.parent
    free = shutil.disk_usage(path).free
    if free >= keep_free:
        return None
    return (
        f"the disk is almost full: {free / 2**20:.0f} MiB free, less than the"
        f" {keep_free / 2**20:.0f} MiB kept free (MAPSVC_MIN_FREE_DISK_BYTES)"
    )
