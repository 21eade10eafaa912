"""The rendering parameters of a raster route (TiTiler's names), as one declared model.

Every route that draws a raster layer (its tiles, a BBOX render, its TileJSON, its configuration)
takes them through :class:`RenderQuery`; :meth:`RenderQuery.rendering` checks them all
(:func:`shared.raster.rendering.parse_rendering`: a bad one is ``400`` naming it) and gives the
canonical :class:`~shared.raster.rendering.Rendering`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints, WithJsonSchema

from api.fields import Query
from shared.errors import InvalidInputError
from shared.raster.rendering import (
    ALGORITHMS,
    MAX_COLORMAP_BYTES,
    MAX_EXPRESSION_CHARS,
    Rendering,
    effective_rendering,
    parse_rendering,
    rendering_from_json,
)
from shared.raster.resampling import DEFAULT_RESAMPLING, LayerResampling, parse_resampling
from shared.tiles.styles import StyleInfo

__all__ = ["RenderQuery", "Resampling", "drawing_of", "raster_source", "rendering_pairs"]


def _resampling_name(text: str) -> str:
    return parse_resampling(text).value  # refused unless a method's name (400)


#: a resampling method by name (``nearest``, ``bilinear``, ``cubic``)
Resampling = Annotated[
    str,
    AfterValidator(_resampling_name),
    WithJsonSchema(
        {
            "type": "string",
            "enum": [r.value for r in LayerResampling],
            "default": DEFAULT_RESAMPLING.value,
        }
    ),
]


#: printable ASCII: what a text parameter (JSON, an expression) is written in. With the lengths,
#: a URL of every parameter stays under uvicorn's 64 KiB, whose refusal is not our JSON error
_PRINTABLE = r"^[ -~]*$"
#: band numbers, one or several separated by commas
_BandList = Annotated[str, StringConstraints(max_length=256, pattern=r"^[0-9,]+$")]
#: ``min,max``: two numbers
_Range = Annotated[str, StringConstraints(max_length=64, pattern=r"^[-+0-9.eE,]+$")]


class RenderQuery(Query):
    """How a raster layer is drawn (TiTiler's parameters); none given: as the layer's own
    rendering says (its configuration's choice, else its default)."""

    bidx: list[_BandList] | None = Field(
        None,
        max_length=64,
        description="Band numbers to draw (repeatable, from 1): one band as gray (or through a"
        " colour map), three as RGB",
        examples=[["4", "3", "2"]],
    )
    expression: str | None = Field(
        None,
        max_length=MAX_EXPRESSION_CHARS,
        pattern=_PRINTABLE,
        description="Band math over `b1…bN` (numexpr; `;` separates output bands), e.g. NDVI"
        " `(b4-b3)/(b4+b3)`; a value that is not finite (a division by zero) is nodata",
        examples=["(b4-b3)/(b4+b3)"],
    )
    rescale: list[_Range] | None = Field(
        None,
        max_length=64,
        description="`min,max` stretched to 0–255, one per band (repeatable; the last serves the"
        " bands after it); default: each band's 2–98 % statistics (not for 8-bit bands)",
        examples=[["-1,1"]],
    )
    colormap_name: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[A-Za-z0-9_]+$",
        description="A named colour map (rio-tiler's: `viridis`, `terrain`,"
        " `rdylgn`, …) over the one band drawn",
        examples=["viridis"],
    )
    colormap: str | None = Field(
        None,
        max_length=MAX_COLORMAP_BYTES,
        pattern=_PRINTABLE,
        description='A colour map as JSON: value → colour (`{"1": "#ff0000", "2": [0, 255, 0,'
        ' 255]}`) or intervals (`[[[0, 100], "#ff0000"], …]`), at most 256 entries and'
        f" {MAX_COLORMAP_BYTES} characters",
    )
    algorithm: str | None = Field(
        None,
        max_length=32,
        description="An algorithm over one band of elevations: `hillshade`, `slope`,"
        " `terrainrgb` (Mapbox), `terrarium` (Mapzen)",
        json_schema_extra={"enum": list(ALGORITHMS)},
    )
    algorithm_params: str | None = Field(
        None,
        max_length=1024,
        pattern=_PRINTABLE,
        description='The algorithm\'s parameters as JSON: hillshade `{"azimuth": 45,'
        ' "angle_altitude": 45, "z_factor": 1}`, slope `z_factor`, terrainrgb `interval`,'
        " `baseval`",
    )
    nodata: str | None = Field(
        None,
        max_length=32,
        pattern=r"^[-+0-9.eEnaN]+$",
        description="The source's nodata value (a number or `nan`)",
    )
    resampling: Resampling | None = Field(
        None,
        description="How the layer's pixels are interpolated when drawn: `nearest` keeps the"
        " source's own values (classes, indices), `bilinear` and `cubic` blend them",
    )

    def rendering(self, band_count: int | None = None) -> Rendering:
        """The rendering these parameters name (canonical); ``band_count``: the layer's bands,
        when known (a band past them is refused).

        Raises:
            InvalidInputError: a parameter out of its bounds (400 naming it).
        """
        return parse_rendering(
            {
                "bidx": self.bidx,
                "expression": self.expression,
                "rescale": self.rescale,
                "colormap_name": self.colormap_name,
                "colormap": self.colormap,
                "algorithm": self.algorithm,
                "algorithm_params": self.algorithm_params,
                "nodata": self.nodata,
                "resampling": self.resampling,
            },
            band_count,
        )


def rendering_pairs(rendering: Rendering) -> list[tuple[str, str]]:
    """``rendering`` as query parameters (a repeatable one once a value), canonical."""
    pairs: list[tuple[str, str]] = []
    for name, value in rendering.params().items():
        values = value if isinstance(value, list) else [value]
        pairs.extend((name, str(v)) for v in values)
    return pairs


def raster_source(info: StyleInfo) -> Path:
    """The source of the raster layer ``info``.

    Raises:
        InvalidInputError: the layer is not a raster (a style of vectors).
    """
    if info.source is None:
        raise InvalidInputError("this layer is not a raster", style=info.style)
    return info.source


def drawing_of(info: StyleInfo, query: RenderQuery) -> Rendering:
    """How the raster layer ``info`` is drawn with the parameters of ``query``.

    Raises:
        InvalidInputError: a parameter out of its bounds, or the layer is not a raster.
    """
    raster_source(info)
    own = rendering_from_json(info.rendering) if info.rendering else None
    return effective_rendering(query.rendering(info.band_count), own)
