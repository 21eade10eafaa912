"""Algorithms over one band of elevations (metres): hillshade, slope, terrain-RGB, Terrarium.

Hillshade and slope are ``gdaldem``'s (Horn's 3 x 3 gradient); their pixel size is the ground
distance of a map pixel (a Web Mercator pixel shrunk by the cosine of its latitude), so that a
slope is as steep at 60° north as at the equator. They need a pixel of data past each side of
the tile (:data:`BUFFER`), which the drawing reads and then cuts off.

Terrain-RGB is Mapbox's encoding (``height = baseval + (R·65536 + G·256 + B) · interval``, by
default ``-10000 + … · 0.1``), Terrarium Mapzen's (``height = R·256 + G + B/256 - 32768``):
both are what MapLibre's ``raster-dem`` source decodes.
"""

from __future__ import annotations

import numpy as np

from shared.raster.rendering import Rendering

__all__ = ["BUFFER", "buffered", "slope_degrees", "hillshade", "terrain_rgb", "terrarium"]

#: Pixels read past each side of a tile for the algorithms that look at neighbours.
BUFFER = 1
_NEEDS_BUFFER = frozenset({"hillshade", "slope"})


def buffered(rendering: Rendering) -> int:
    """The pixels past each side of the tile ``rendering`` needs read."""
    return BUFFER if rendering.algorithm in _NEEDS_BUFFER else 0


def _gradients(
    z: np.ndarray, xres: np.ndarray, yres: float, z_factor: float
) -> tuple[np.ndarray, np.ndarray]:
    """Horn's dz/dx and dz/dy of the inside of ``z`` (one pixel less on each side)."""
    a, b, c = z[:-2, :-2], z[:-2, 1:-1], z[:-2, 2:]
    d, f = z[1:-1, :-2], z[1:-1, 2:]
    g, h, i = z[2:, :-2], z[2:, 1:-1], z[2:, 2:]
    # ((c + 2f + i) - (a + 2d + g)) / (8 xres) * z_factor, and alike for dz/dy: the same
    # operations in the same order (the same bits), with fewer arrays made
    dzdx = _difference(c, f, i, a, d, g) / (8 * xres)
    dzdy = _difference(g, h, i, a, b, c) / (8 * yres)
    if z_factor != 1:  # times 1 is the same number
        dzdx *= z_factor
        dzdy *= z_factor
    return dzdx, dzdy


def _difference(
    p: np.ndarray, q: np.ndarray, r: np.ndarray, u: np.ndarray, v: np.ndarray, w: np.ndarray
) -> np.ndarray:
    """``(p + 2q + r) - (u + 2v + w)``."""
    out = 2 * q
    out += p
    out += r
    other = 2 * v
    other += u
    other += w
    out -= other
    return out


def slope_degrees(z: np.ndarray, xres: np.ndarray, yres: np.ndarray, z_factor: float) -> np.ndarray:
    """The slope in degrees of the inside of ``z``; ``xres``/``yres``: each inner row's ground
    pixel size (metres, a column vector)."""
    dzdx, dzdy = _gradients(z, xres, yres, z_factor)  # type: ignore[arg-type]
    slope = np.hypot(dzdx, dzdy, out=dzdx)
    np.arctan(slope, out=slope)
    np.degrees(slope, out=slope)
    out: np.ndarray = slope.astype("float32")
    return out


def hillshade(
    z: np.ndarray,
    xres: np.ndarray,
    yres: np.ndarray,
    *,
    azimuth: float,
    altitude: float,
    z_factor: float,
) -> np.ndarray:
    """``gdaldem hillshade``'s shade (1..255) of the inside of ``z``."""
    dzdx, dzdy = _gradients(z, xres, yres, z_factor)  # type: ignore[arg-type]
    # the light's direction clockwise from north, turned into the angle of the formula below
    alt, az = np.radians(altitude), np.radians(180.0 - azimuth)
    # gdaldem's: its x is the fall from left to right (-dz/dx), its y the rise downwards:
    #   shade = (sin(alt) - cos(alt) (y cos(az) - x sin(az))) / sqrt(1 + x² + y²)
    # computed in place: x² is dzdx², and - x sin(az) is + dzdx sin(az), to the bit
    norm = dzdx * dzdx
    term = dzdy * dzdy
    norm += term
    norm += 1
    np.sqrt(norm, out=norm)
    np.multiply(dzdx, np.sin(az), out=term)
    shade = dzdy * np.cos(az)
    shade += term
    shade *= np.cos(alt)
    np.subtract(np.sin(alt), shade, out=shade)
    shade /= norm
    shade *= 254
    shade += 1
    np.clip(shade, 1, 255, out=shade)
    out: np.ndarray = shade.astype("float32")
    return out


def terrain_rgb(z: np.ndarray, *, interval: float, baseval: float) -> np.ndarray:
    """Mapbox terrain-RGB of ``z`` (3, rows, columns of bytes)."""
    value = np.clip(np.round((z - baseval) / interval), 0, 256**3 - 1).astype("uint32")
    return np.stack([(value >> 16) & 255, (value >> 8) & 255, value & 255]).astype("uint8")


def terrarium(z: np.ndarray) -> np.ndarray:
    """Mapzen Terrarium of ``z`` (3, rows, columns of bytes)."""
    value = np.clip(z + 32768.0, 0, 65536 - 1 / 256)
    red = np.floor(value / 256)
    green = np.floor(value - red * 256)
    blue = np.floor((value - np.floor(value)) * 256)
    return np.stack([red, green, blue]).astype("uint8")
