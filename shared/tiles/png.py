"""Tile images without Mapnik: a rendered image as passed around, and the empty PNG."""

from __future__ import annotations

import functools
import struct
import zlib
from dataclasses import dataclass

__all__ = ["Rendered", "transparent_png"]


@dataclass(frozen=True)
class Rendered:
    """A rendered image: its encoded bytes (PNG, WebP or JPEG), and whether nothing was drawn."""

    data: bytes
    empty: bool


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@functools.cache
def transparent_png(width: int = 256, height: int = 256) -> bytes:
    """A ``width`` x ``height`` RGBA PNG whose every pixel is transparent."""
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA
    rows = b"".join(b"\x00" + b"\x00" * (4 * width) for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(rows, 9))
        + _chunk(b"IEND", b"")
    )
