"""The empty tile, made without Mapnik: a valid RGBA PNG whose every pixel is transparent."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from shared.base.png import png_avg, transparent_png
from tests.layers import decode

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    """The ``(kind, data)`` of each chunk, each CRC checked."""
    assert png[:8] == SIGNATURE
    found, at = [], 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + data), kind
        found.append((kind, data))
        at += 12 + length
    return found


def test_the_png_has_the_size_asked_and_only_transparent_rows() -> None:
    (ihdr, header), (idat, rows), (iend, end) = chunks(transparent_png(3, 2))

    assert (ihdr, idat, iend, end) == (b"IHDR", b"IDAT", b"IEND", b"")
    assert struct.unpack(">IIBBBBB", header) == (3, 2, 8, 6, 0, 0, 0)  # 8-bit RGBA
    assert zlib.decompress(rows) == (b"\x00" + bytes(4 * 3)) * 2  # filter 0, all zero


def test_the_empty_tile_decodes_to_transparent_pixels() -> None:
    pixels = decode(transparent_png())

    assert pixels.shape == (4, 256, 256)
    assert not pixels.any()


@pytest.mark.parametrize(("rows", "channels"), [(256, 4), (768, 4), (768, 3)])
def test_a_png_of_any_size_gives_its_pixels_back(rows: int, channels: int) -> None:
    """An image of up to 2 MiB of rows is deflated whole, a larger map in two halves at once:
    one zlib stream (zlib checks its Adler-32) that GDAL reads back to the very pixels."""
    rng = np.random.default_rng(rows)
    gradient = np.add.outer(np.arange(rows), np.arange(1024)) % 251
    pixels = np.dstack([gradient, gradient[::-1], gradient.T[:1024, :rows].T, gradient])
    pixels = (pixels + rng.integers(0, 5, pixels.shape)).astype(np.uint8)[..., :channels]
    png = png_avg(pixels)
    found = dict(chunks(png))
    width, height, depth, colour = struct.unpack(">IIBB", found[b"IHDR"][:10])
    assert (width, height, depth, colour) == (1024, rows, 8, 6 if channels == 4 else 2)
    raw = zlib.decompress(found[b"IDAT"])  # the checksum of the whole stream is checked
    assert len(raw) == rows * (1024 * channels + 1)
    assert np.array_equal(np.moveaxis(decode(png), 0, -1), pixels)
