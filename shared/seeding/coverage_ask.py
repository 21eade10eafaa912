"""The coverage an operation asks for (issue 25), as a request or a command names it.

At most one of: a ``bbox`` in any CRS (``bbox_crs``), a GeoJSON (Multi)Polygon, or the
polygons of a vector layer of ours (``coverage_layer``) that a CQL2-text ``where`` picks; and a
``buffer`` in pixels. The API's routes (pre-tiling, export) and the ``mapsvc export`` command
name a coverage so; each finds a vector layer its own way (the API with its catalogue and the
caller's sight, the command with a catalogue of its own), given as ``layer_of``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from shared.errors import InvalidInputError
from shared.seeding.coverage import Coverage, layer_coverage
from shared.settings import Settings
from shared.vector.catalog import Catalogue, VectorLayer
from shared.vector.db import make_engine

__all__ = ["AskedCoverage", "coverage_in_process"]

#: finds a vector layer by its id (``NotFoundError`` when the caller may not see it)
LayerOf = Callable[[str], Awaitable[VectorLayer]]


@dataclass(frozen=True)
class AskedCoverage:
    """A coverage as asked: ``geojson`` is a parsed GeoJSON value (a request's body)."""

    bbox: str | None = None
    bbox_crs: str = "EPSG:4326"
    geojson: Any = None
    coverage_layer: str | None = None
    where: str | None = None
    buffer: int = 0

    def check(self) -> None:
        """Refuse two coverages at once, and ``where`` without ``coverage_layer``.

        Raises:
            InvalidInputError: naming the second coverage, or ``where``.
        """
        given = [
            name
            for name, value in (
                ("bbox", self.bbox),
                ("coverage_layer", self.coverage_layer),
                ("body", self.geojson),
            )
            if value is not None
        ]
        if len(given) > 1:
            raise InvalidInputError(
                f"give one coverage, not {' and '.join(given)}", parameter=given[1]
            )
        if self.where is not None and self.coverage_layer is None:
            raise InvalidInputError("where filters coverage_layer: name it", parameter="where")

    async def coverage(
        self, layer_of: LayerOf, engine: AsyncEngine | None, timeout_ms: int
    ) -> Coverage | None:
        """The coverage; None when none is asked (the layer's footprint, as it is).

        Args:
            layer_of: finds ``coverage_layer``.
            engine: the database of ``coverage_layer`` (unused without one).
            timeout_ms: the statement timeout of its union.

        Raises:
            InvalidInputError: see :meth:`check`; a bad box or polygon; a layer without polygons.
            NotFoundError: ``coverage_layer`` is not a layer the caller sees.
            UnprocessableError: ``coverage_layer`` and ``where`` match no polygon.
        """
        self.check()
        if self.bbox is not None:
            return Coverage.of_bbox(self.bbox, self.bbox_crs, self.buffer)
        if self.geojson is not None:
            return Coverage.of_geojson(self.geojson, self.buffer)
        if self.coverage_layer is None:
            return None
        assert engine is not None, "a coverage layer is read from the database"
        layer = await layer_of(self.coverage_layer)
        return await layer_coverage(engine, layer, self.where, self.buffer, timeout_ms)


def coverage_in_process(asked: AskedCoverage, settings: Settings) -> Coverage | None:
    """:meth:`AskedCoverage.coverage` in a command: a database engine and a catalogue of its
    own when ``coverage_layer`` is asked (every layer of the configured schemas)."""

    async def find() -> Coverage | None:
        if asked.coverage_layer is None:
            return await asked.coverage(_no_layer, None, 0)
        vector = settings.vector
        engine = make_engine(settings, connections=1)
        try:
            catalogue = Catalogue(list(vector.schemas), vector.config, vector.catalog_ttl_s)
            return await asked.coverage(
                lambda layer_id: catalogue.layer(engine, layer_id),
                engine,
                vector.statement_timeout_ms,
            )
        finally:
            await engine.dispose()

    return asyncio.run(find())


async def _no_layer(layer_id: str) -> VectorLayer:
    raise AssertionError("no coverage layer asked")
