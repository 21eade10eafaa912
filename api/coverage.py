"""The coverage of a tile job as its request names it (issue 25): the query's fields, and a
GeoJSON polygon as the body of ``POST``. Pre-tiling and export take the same ones."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

from api.fields import Box, JobQuery, Srs, Text
from api.services import services
from shared.seeding.coverage import MAX_BUFFER, MAX_VERTICES, Coverage
from shared.seeding.coverage_ask import AskedCoverage
from shared.vector.catalog import VectorLayer
from shared.vector.cql import MAX_FILTER_CHARS

__all__ = ["CoverageBody", "CoverageQuery", "coverage_of"]


class CoverageQuery(JobQuery):
    """A job over a coverage: at most one of ``bbox``, ``coverage_layer`` and a body."""

    bbox: Box | None = Field(
        None, description="Coverage: only the tiles meeting this box, minx,miny,maxx,maxy"
    )
    bbox_crs: Srs = Field("EPSG:4326", description="CRS of `bbox` (its edges are densified)")
    coverage_layer: str | None = Text(
        200,
        default=None,
        description="Coverage: the polygons of this vector layer (`where` picks rows)",
        examples=["public.countries"],
    )
    where: str | None = Text(
        MAX_FILTER_CHARS,
        default=None,
        description="CQL2-text filter of `coverage_layer`'s rows (e.g. `name = 'Kyiv'`)",
    )
    buffer: int = Field(
        0, ge=0, le=MAX_BUFFER, description="Grow each tile by this many pixels of its zoom"
    )


class CoverageBody(BaseModel):
    """A coverage: a GeoJSON Polygon or MultiPolygon in EPSG:4326, or a Feature of one."""

    model_config = ConfigDict(extra="allow")

    type: Literal["Polygon", "MultiPolygon", "Feature"] = Field(
        description=f"The GeoJSON type (at most {MAX_VERTICES} vertices, a valid polygon)"
    )
    coordinates: Any = Field(None, description="The rings (Polygon, MultiPolygon)")
    geometry: Any = Field(None, description="The Polygon or MultiPolygon (Feature)")


async def coverage_of(
    request: Request, query: CoverageQuery, body: CoverageBody | None
) -> Coverage | None:
    """The coverage a request asks for; None: the layer's footprint, as it is.

    ``coverage_layer`` is found in the catalogue the caller sees (the route's access rule
    judged it too).

    Raises:
        InvalidInputError: two coverages, ``where`` without ``coverage_layer``, a bad one.
        NotFoundError: ``coverage_layer`` is no vector layer.
        UnprocessableError: ``coverage_layer`` and ``where`` match no polygon.
    """
    svc = services(request)
    asked = AskedCoverage(
        query.bbox,
        query.bbox_crs,
        None if body is None else body.model_dump(),
        query.coverage_layer,
        query.where,
        query.buffer,
    )

    async def layer_of(layer_id: str) -> VectorLayer:
        return await svc.vector.layer(svc.db, layer_id)

    return await asked.coverage(layer_of, svc.db, svc.settings.vector.statement_timeout_ms)
