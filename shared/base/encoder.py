"""From a drawn Mapnik image to the bytes of its tiles, a tile drawn alone or a metatile's.

Encoding is most of a tile's time once Mapnik's cost per render is shared by a metatile's 64
tiles, so it is cut down three ways:

- a tile of one colour (the open sea, nothing drawn, the inside of a country at the seeding
  zooms: half the tiles of the demo countries at zooms 0-5) is encoded once per format, size
  and colour in a process (:class:`SolidTiles`), and its bytes reused: the encoders are
  deterministic, so they are the bytes of encoding the tile itself;
- a PNG tile is written by numpy and zlib-ng (:func:`shared.base.png.png_avg`): the pixels and
  row filter of Mapnik's ``PNG_FORMAT``, deflated faster and smaller than Mapnik's zlib does;
- the image's pixels are read into numpy once, and each tile is a view of them (no copy per
  tile; a numpy comparison tells a tile of one colour).

WebP and JPEG tiles are Mapnik's encoding of a view of the image (JPEG's over
``JPEG_BACKGROUND``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shared.base.encoding import JPEG_BACKGROUND, PNG_FORMAT, Codec
from shared.base.png import Rendered, png_avg
from shared.mapnik_env import mapnik

__all__ = ["Background", "Cutter", "SolidTiles"]

#: An opaque colour a render is drawn over (red, green, blue), for a format or a map that has
#: no transparency.
Background = tuple[int, int, int]

#: one-colour tiles kept by a process (a few hundred bytes each): formats x sizes x colours
_SOLID_TILES = 512


class SolidTiles:
    """The bytes of one-colour tiles by format (Mapnik's options), width, height, colour and
    whether written without alpha, each encoded once in a process; the oldest forgotten past
    ``limit``."""

    def __init__(self, limit: int = _SOLID_TILES) -> None:
        self.limit = limit
        self._bytes: dict[tuple[str, int, int, int, bool], bytes] = {}

    def get(self, key: tuple[str, int, int, int, bool], encode: Callable[[], bytes]) -> bytes:
        """The bytes of the tile of ``key``: kept, else ``encode()`` (then kept)."""
        data = self._bytes.get(key)
        if data is None:
            data = encode()
            if len(self._bytes) >= self.limit:
                del self._bytes[next(iter(self._bytes))]
            self._bytes[key] = data
        return data

    def clear(self) -> None:
        """Forget every tile (a benchmark's cold start)."""
        self._bytes.clear()

    def __len__(self) -> int:
        return len(self._bytes)


class Cutter:
    """The tiles of one drawn image, each of a part of it, encoded by ``codec``.

    The image's pixels are read once (a copy: 21 MB for a metatile of 8 x 8 tiles with its
    buffer; twice that for JPEG, before and after its background) and each tile is a numpy view
    of them, to tell a tile of one colour and to write its PNG.

    Args:
        image: what Mapnik drew.
        codec: how the tiles are encoded.
        solid: the one-colour tiles of the process.
        pixels: the RGBA pixels drawn without Mapnik (``image`` then stands for them).
        opaque: every pixel is opaque: PNG tiles are written without alpha.
    """

    def __init__(
        self,
        image: Any,
        codec: Codec,
        solid: SolidTiles,
        pixels: np.ndarray | None = None,
        opaque: bool = False,
    ) -> None:
        self.image = image
        self.codec = codec
        self.solid = solid
        self.painted = bool(image.painted()) if pixels is None else True
        drawn = _rgba(image) if pixels is None else pixels
        #: the pixels drawn, each as one 32-bit word (0: transparent), read before a JPEG's
        #: background is composited: compositing changes the image it composites
        self.drawn = _words(drawn)
        # a format without alpha gets JPEG_BACKGROUND behind the map
        self.flat = image if codec.format.has_alpha else _flattened(image)
        #: the pixels encoded, RGBA (rows, columns, 4), and as words
        self.pixels = drawn if self.flat is image else _rgba(self.flat)
        self.words = self.drawn if self.flat is image else _words(self.pixels)
        # numpy and zlib-ng write the PNG of unpremultiplied pixels (Mapnik's render leaves
        # them so; Mapnik encodes an image that is not)
        self.numpy_png = codec.options == PNG_FORMAT and (
            pixels is not None or not image.premultiplied()
        )
        #: every pixel opaque: a PNG without alpha
        self.opaque = opaque

    @classmethod
    def of_pixels(
        cls,
        pixels: np.ndarray,
        codec: Codec,
        solid: SolidTiles,
        background: Background | None = None,
    ) -> Cutter:
        """The tiles of RGBA ``pixels`` (rows, columns, 4 bytes; not premultiplied) drawn
        without Mapnik (over ``background`` when given): PNG tiles written from them, the other
        formats by Mapnik's encoders from an image of them."""
        if background is not None:
            pixels = _over(pixels, background)
        if codec.options == PNG_FORMAT:
            # opaque over a background: an RGB PNG, a quarter fewer bytes to write
            return cls(_PixelsOnly(), codec, solid, pixels, opaque=background is not None)
        image = mapnik.Image.from_buffer(png_avg(pixels))
        return cls(image, codec, solid, pixels)

    @classmethod
    def over(cls, image: Any, codec: Codec, solid: SolidTiles, background: Background) -> Cutter:
        """The tiles of what Mapnik drew, over the colour ``background`` (composited by numpy,
        as :meth:`of_pixels` does)."""
        return cls.of_pixels(_rgba(image), codec, solid, background)

    def tile(self, x: int, y: int, width: int, height: int) -> Rendered:
        """The tile of the ``width`` x ``height`` pixels from column ``x``, row ``y``; empty
        when nothing was drawn on the image, or the tile is all transparent (0)."""
        words = self.words[y : y + height, x : x + width]
        colour = int(words[0, 0])
        solid = bool((words == colour).all())
        if solid:
            key = (self.codec.options, width, height, colour, self.opaque)
            data = self.solid.get(key, lambda: self._encode(x, y, width, height))
        else:
            data = self._encode(x, y, width, height)
        blank = solid and colour == 0
        if self.flat is not self.image:  # a JPEG's tile is blank by what was drawn
            blank = not self.drawn[y : y + height, x : x + width].any()
        return Rendered(data, not self.painted or blank, solid)

    def _encode(self, x: int, y: int, width: int, height: int) -> bytes:
        """The bytes of the tile's part of the flattened image."""
        if self.numpy_png:
            part = self.pixels[y : y + height, x : x + width]
            return png_avg(part[..., :3] if self.opaque else part)
        data: bytes = _part(self.flat, x, y, width, height).to_string(self.codec.options)
        return data


class _PixelsOnly:
    """The image of a cutter of pixels encoded without Mapnik (never read)."""


def _rgba(image: Any) -> np.ndarray:
    """A copy of the pixels of ``image`` (rows, columns, RGBA bytes)."""
    return np.frombuffer(image.to_string(), np.uint8).reshape(image.height(), image.width(), 4)


def _words(pixels: np.ndarray) -> np.ndarray:
    """RGBA ``pixels`` with each pixel as one 32-bit word (rows, columns): a view."""
    return pixels.view(np.uint32).reshape(pixels.shape[:2])


def _part(image: Any, x: int, y: int, width: int, height: int) -> Any:
    """The view of ``image``'s ``width`` x ``height`` pixels from column ``x``, row ``y``; the
    image itself when they are all of it."""
    if (x, y, width, height) == (0, 0, image.width(), image.height()):
        return image
    return image.view(x, y, width, height)


def _flattened(image: Any) -> Any:
    """``image`` over ``JPEG_BACKGROUND`` (a new image)."""
    background = mapnik.Image(image.width(), image.height())
    background.fill(mapnik.Color(*JPEG_BACKGROUND))
    background.composite(image)
    return background


def _over(pixels: np.ndarray, colour: Background) -> np.ndarray:
    """RGBA ``pixels`` (not premultiplied) over the colour ``colour``: opaque (``pixels``
    themselves when they are; else those that are not composited, in a copy)."""
    clear = np.flatnonzero(pixels[..., 3].ravel() != 255)
    if clear.size == 0:
        return pixels
    out = pixels.copy()
    flat = out.reshape(-1, 4)
    # the pixels that are not opaque, or all of them when they are many (one pass is faster)
    part = flat[clear] if clear.size * 8 < len(flat) else flat
    alpha = part[:, 3:4].astype(np.uint16)
    rgb = part[:, :3] * alpha + np.array(colour, np.uint16) * (255 - alpha)
    part[:, :3] = (rgb + 127) // 255
    part[:, 3] = 255
    if part is not flat:
        flat[clear] = part
    return out
