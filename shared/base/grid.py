"""The tile grid (Web Mercator, morecantile's ``WebMercatorQuad``) and tile addresses."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import morecantile

from shared.errors import InvalidInputError, NotFoundError

__all__ = ["MAX_ZOOM", "TMS", "RenderArea", "TileAddress", "parse_tile"]

TMS = morecantile.tms.get("WebMercatorQuad")
MAX_ZOOM = 24


@dataclass(frozen=True)
class RenderArea:
    """What one render draws: ``bbox`` (in the map's CRS, or in ``srs``) at a pixel size;
    with ``srs``, the image is drawn in that CRS (a BBOX render in EPSG:4326 is a plate carrée
    image, as WMS wants it).

    ``scale`` is Mapnik's ``scale_factor``: 2 for ``@2x`` tiles, drawn at twice the pixels with
    symbols, lines and labels twice as large.
    """

    bbox: tuple[float, float, float, float]
    width: int
    height: int
    srs: str | None = None
    scale: int = 1


@dataclass(frozen=True)
class TileAddress:
    """A tile of the grid."""

    z: int
    x: int
    y: int

    def bounds_3857(self) -> tuple[float, float, float, float]:
        """The tile's bounds in EPSG:3857 metres."""
        b = TMS.xy_bounds(morecantile.Tile(self.x, self.y, self.z))
        return (b.left, b.bottom, b.right, b.top)

    def area(self, tile_size: int, scale: int = 1) -> RenderArea:
        """The render of this tile, ``tile_size`` x ``scale`` pixels a side."""
        side = tile_size * scale
        return RenderArea(self.bounds_3857(), side, side, scale=scale)

    def bounds_4326(self) -> tuple[float, float, float, float]:
        """The tile's bounds in degrees."""
        return _bounds_4326(self.z, self.x, self.y)

    def intersects(self, extent: list[float]) -> bool:
        """Whether the tile overlaps ``[min_lon, min_lat, max_lon, max_lat]`` (not just touches)."""
        w, s, e, n = self.bounds_4326()
        return w < extent[2] and e > extent[0] and s < extent[3] and n > extent[1]


@functools.lru_cache(maxsize=65536)
def _bounds_4326(z: int, x: int, y: int) -> tuple[float, float, float, float]:
    """A tile's bounds in degrees (kept: morecantile goes through pyproj each time)."""
    b = TMS.bounds(morecantile.Tile(x, y, z))
    return (b.left, b.bottom, b.right, b.top)


def _integer(name: str, value: str | int) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidInputError(f"{name} must be an integer", parameter=name, value=value) from None


def parse_tile(z: str | int, x: str | int, y: str | int) -> TileAddress:
    """The tile at ``z/x/y`` as given in a URL.

    Raises:
        InvalidInputError: a part is not an integer, a zoom out of 0..24, or a negative part.
        NotFoundError: a column or row past the zoom's last (no such tile).
    """
    tile = TileAddress(_integer("z", z), _integer("x", x), _integer("y", y))
    if not 0 <= tile.z <= MAX_ZOOM:
        raise InvalidInputError(f"z must be 0..{MAX_ZOOM}", parameter="z", value=tile.z)
    side = 2**tile.z
    for name, value in (("x", tile.x), ("y", tile.y)):
        if value < 0:
            raise InvalidInputError(f"{name} must be 0 or more", parameter=name, value=value)
        if value >= side:  # a well-formed address of no tile: none exists there (OGC API)
            raise NotFoundError(
                f"no such tile: {name} is 0..{side - 1} at zoom {tile.z}",
                parameter=name,
                value=value,
            )
    return tile
