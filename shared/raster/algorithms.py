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
    dzdx = ((c + 2 * f + i) - (a + 2 * d + g)) / (8 * xres) * z_factor
    dzdy = ((g + 2 * h + i) - (a + 2 * b + c)) / (8 * yres) * z_factor
    return dzdx, dzdy


def slope_degrees(z: np.ndarray, xres: np.ndarray, yres: np.ndarray, z_factor: float) -> np.ndarray:
    """The slope in degrees of the inside of ``z``; ``xres``/``yres``: each inner row's ground
    pixel size (metres, a column vector)."""
    dzdx, dzdy = _gradients(z, xres, yres, z_factor)  # type: ignore[arg-type]
    slope: np.ndarray = np.degrees(np.arctan(np.hypot(dzdx, dzdy))).astype("float32")
    return slope


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
    # gdaldem's: its x is the fall from left to right (-dz/dx), its y the rise downwards
    x, y = -dzdx, dzdy
    xx_plus_yy = x * x + y * y
    aspect_term = y * np.cos(az) - x * np.sin(az)
    shade = (np.sin(alt) - np.cos(alt) * aspect_term) / np.sqrt(1 + xx_plus_yy)
    out: np.ndarray = np.clip(1 + 254 * shade, 1, 255).astype("float32")
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
