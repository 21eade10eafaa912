"""Metatiles: a block of tiles of one zoom drawn as one image with a buffer around it, then cut.

Pre-tiling renders its chunks so, as mod_tile and tilecloud-chain seed: Mapnik's cost per render
(the style's setup, a query or raster read per layer) is paid once per block instead of once per
tile, and labels and symbols near a tile's border are drawn whole, across it, because the render
sees the tiles around (and the buffer: what lies up to its pixels past the block is drawn too,
then cut away). A tile asked for on demand is rendered alone: its user waits for that one tile,
and a metatile would make them wait for 64.

A block is aligned to multiples of its side in the grid (the same block whichever tile of it is
asked), holds only the tiles to render (their bounding box: a partly cached chunk renders less),
and its buffer stops at the world's edge (Web Mercator has nothing past it to draw or to read).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from shared.base.grid import RenderArea, TileAddress
from shared.settings import TileSettings

__all__ = ["DEFAULT_METATILING", "Metatile", "Metatiling", "metatiles"]


@dataclass(frozen=True)
class Metatiling:
    """How pre-tiling draws tiles: blocks of ``size`` x ``size`` with ``buffer`` pixels around
    (``MAPSVC_METATILE_SIZE``, ``MAPSVC_METATILE_BUFFER``); ``size`` 1 draws tile by tile."""

    size: int = 8
    buffer: int = 128

    @classmethod
    def from_settings(cls, tiles: TileSettings) -> Metatiling:
        """The metatiling the tile settings name."""
        return cls(tiles.metatile_size, tiles.metatile_buffer)


#: the settings' defaults
DEFAULT_METATILING = Metatiling()


@dataclass(frozen=True)
class _Cut:
    """Where a metatile's tiles lie in its image: pixels of a tile, and the buffer before."""

    side: int
    left: int
    top: int


@dataclass(frozen=True)
class Metatile:
    """A block of tiles of zoom ``z``, columns ``x0..x1`` and rows ``y0..y1`` inclusive."""

    z: int
    x0: int
    y0: int
    x1: int
    y1: int

    def tiles(self) -> Iterator[TileAddress]:
        """The tiles of the block, row by row."""
        for y in range(self.y0, self.y1 + 1):
            for x in range(self.x0, self.x1 + 1):
                yield TileAddress(self.z, x, y)

    def _buffers(self, pixels: int, side: int) -> tuple[int, int, int, int]:
        """The buffer in pixels on the left, top, right and bottom: ``pixels``, but none past
        the world's edge (tile edges are pixel edges, so the edge is whole tiles away)."""
        last = 2**self.z - 1
        return (
            min(pixels, self.x0 * side),
            min(pixels, self.y0 * side),
            min(pixels, (last - self.x1) * side),
            min(pixels, (last - self.y1) * side),
        )

    def area(self, tile_size: int, scale: int = 1, buffer: int = 0) -> tuple[RenderArea, _Cut]:
        """The render of the block with ``buffer`` pixels (of a ``scale`` 1 tile) around it,
        tiles ``tile_size`` x ``scale`` pixels a side; and where its tiles lie in the image."""
        side = tile_size * scale
        left, top, right, bottom = self._buffers(buffer * scale, side)
        west, _, _, north = TileAddress(self.z, self.x0, self.y0).bounds_3857()
        _, south, east, _ = TileAddress(self.z, self.x1, self.y1).bounds_3857()
        metres = (east - west) / ((self.x1 - self.x0 + 1) * side)  # of a pixel
        bbox = (
            west - left * metres,
            south - bottom * metres,
            east + right * metres,
            north + top * metres,
        )
        width = (self.x1 - self.x0 + 1) * side + left + right
        height = (self.y1 - self.y0 + 1) * side + top + bottom
        return RenderArea(bbox, width, height, scale=scale), _Cut(side, left, top)

    def offset(self, tile: TileAddress, cut: _Cut) -> tuple[int, int]:
        """The pixel column and row of ``tile``'s top left corner in the block's image."""
        return cut.left + (tile.x - self.x0) * cut.side, cut.top + (tile.y - self.y0) * cut.side


def metatiles(tiles: Iterable[TileAddress], size: int) -> list[tuple[Metatile, list[TileAddress]]]:
    """``tiles`` by the aligned ``size`` x ``size`` blocks that hold them, in the order of each
    block's first tile: each block the bounding box of its tiles, with its tiles in order."""
    groups: dict[tuple[int, int, int], list[TileAddress]] = {}
    for tile in tiles:
        groups.setdefault((tile.z, tile.x // size, tile.y // size), []).append(tile)
    out = []
    for members in groups.values():
        xs, ys = [t.x for t in members], [t.y for t in members]
        out.append((Metatile(members[0].z, min(xs), min(ys), max(xs), max(ys)), members))
    return out
