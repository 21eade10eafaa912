"""Tile images without Mapnik: a rendered image as passed around, the empty PNG, and RGBA
pixels encoded as libpng encodes them under Mapnik's PNG format (:func:`png_avg`)."""

from __future__ import annotations

import functools
import struct
import zlib
from dataclasses import dataclass

import numpy as np

__all__ = ["Rendered", "png_avg", "png_avg_fits", "transparent_png"]

#: the bytes of each IDAT chunk but the last, as libpng writes them under Mapnik
_IDAT_BYTES = 32768
#: libpng deflates an image of more filtered bytes than this with zlib's whole window (15 bits),
#: a smaller one with a smaller window
_SMALL_IMAGE = 16384


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


def png_avg_fits(width: int, height: int) -> bool:
    """Whether :func:`png_avg` writes libpng's bytes for an image of ``width`` x ``height``:
    libpng shrinks zlib's window for an image of 16 kB or less (filtered), :func:`png_avg` not."""
    return height * (4 * width + 1) > _SMALL_IMAGE


def png_avg(pixels: np.ndarray, level: int) -> bytes:
    """``pixels`` (rows, columns, RGBA bytes; not premultiplied) as an 8-bit RGBA PNG, every
    row with the "average" filter, deflated at zlib ``level``.

    The bytes libpng writes for Mapnik's ``png32:z=<level>:f=avg`` (the same filter, zlib's
    default window, memory level and strategy, IDAT chunks of 32 kB) for an image that
    :func:`png_avg_fits`, in a third of its time: the filter is one numpy expression instead of
    a loop per byte, and zlib lets other threads run while it compresses. Whether the zlib of
    the process compresses as Mapnik's does is for the caller to check (see
    :mod:`shared.tiles.encoder`).
    """
    height, width, _ = pixels.shape
    rows = pixels.reshape(height, 4 * width)
    # average filter: each byte less the floor of the mean of the byte one pixel left and the
    # byte above (0 past the image's edge), modulo 256
    mean = np.zeros((height, 4 * width), np.uint16)
    mean[:, 4:] = rows[:, :-4]
    mean[1:] += rows[:-1]
    mean >>= 1
    filtered = np.empty((height, 4 * width + 1), np.uint8)
    filtered[:, 0] = 3  # the filter type of each row: average
    np.subtract(rows, mean, out=filtered[:, 1:], casting="unsafe")
    deflate = zlib.compressobj(level, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY)
    stream = deflate.compress(filtered.data) + deflate.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA
    idat = (
        _chunk(b"IDAT", stream[i : i + _IDAT_BYTES]) for i in range(0, len(stream), _IDAT_BYTES)
    )
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + b"".join(idat) + _chunk(b"IEND", b"")
