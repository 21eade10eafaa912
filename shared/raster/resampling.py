"""The resampling of a raster layer: how its pixels are interpolated, chosen at configuration.

One name per method (``gis-raster/<path>?resampling=``): the Mapnik XML draws the layer with
it (the ``scaling`` of its ``RasterSymbolizer``), and its previews and overviews are computed
with it, so that a ``nearest`` layer shows only the source's own values at every zoom.
"""

from __future__ import annotations

from enum import StrEnum

from rasterio.enums import Resampling

from shared.errors import InvalidInputError

__all__ = ["DEFAULT_RESAMPLING", "LayerResampling", "from_mapnik", "parse_resampling"]


class LayerResampling(StrEnum):
    """A resampling method of a layer, by its API name."""

    NEAREST = "nearest"
    BILINEAR = "bilinear"
    CUBIC = "cubic"

    @property
    def mapnik(self) -> str:
        """The ``scaling`` of Mapnik's ``RasterSymbolizer``."""
        return _MAPNIK[self]

    @property
    def gdal(self) -> Resampling:
        """The method GDAL reduces the layer's rasters with (previews, overviews)."""
        return Resampling[self.value]


_MAPNIK = {
    LayerResampling.NEAREST: "near",
    LayerResampling.BILINEAR: "bilinear",
    LayerResampling.CUBIC: "bicubic",
}


def from_mapnik(scaling: str | None) -> LayerResampling:
    """The resampling of a Mapnik ``scaling`` a layer's XML names (the default for another)."""
    for method, name in _MAPNIK.items():
        if name == scaling:
            return method
    return DEFAULT_RESAMPLING


#: Imagery looks best interpolated; what every layer was before the choice existed.
DEFAULT_RESAMPLING = LayerResampling.BILINEAR


def parse_resampling(text: str | None) -> LayerResampling:
    """The resampling named by ``text``; the default when it is absent or empty.

    Raises:
        InvalidInputError: not one of the methods.
    """
    if not text:
        return DEFAULT_RESAMPLING
    try:
        return LayerResampling(text)
    except ValueError:
        names = ", ".join(LayerResampling)
        raise InvalidInputError(
            f"resampling must be one of {names}", parameter="resampling", value=text[:32]
        ) from None
