"""How a process that draws large images holds its memory: glibc's malloc, told to keep it.

A metatile is a 2,304 px square image (21 MB; 85 MB at ``@2x``) and a copy of its pixels, made
and freed once per chunk. By default glibc's malloc maps a block that large afresh each time
and hands it back when freed, so every page of every metatile is a page fault again, and the
heap's top is trimmed as soon as 128 kB lie free there. Measured over the 5,461 tiles of the
PostGIS countries at zooms 0-6 drawn as metatiles in one process: 2.6 s, of which 1.2 s of
kernel time; 1.9 s and 0.2 s with :func:`keep_image_memory` (reading the pixels of the
metatiles 3 times faster, drawing them 20 % faster).
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_image_memory"]

#: ``mallopt``'s parameters (glibc's ``malloc.h``)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: a block up to this size comes from the heap, not a mapping of its own (glibc's most: 32 MiB)
MMAP_THRESHOLD = 32 << 20
#: memory freed at the heap's top that a process keeps for its next images: enough for an
#: ``@2x`` metatile and the copy of its pixels
TRIM_THRESHOLD = 256 << 20


def keep_image_memory() -> bool:
    """Have this process take large images from its heap and keep what they free (glibc's
    ``mallopt``); whether it could (not under another C library)."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
