"""A GeoJSON answer of a layer (spec 4.8): its cache entry, its paging links, its stream.

The answer depends only on the layer, its normalised query and the paging: those make its
links (``self``, ``next``, ``prev``) and, through the ``self`` link, its cache key. An answer
of at most :data:`CACHE_LIMIT` bytes is kept in the cache as it streams; a larger one is
streamed only.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from shared.vector.cache import VectorCache
from shared.vector.catalog import VectorLayer
from shared.vector.features import GeoJsonPage, open_geojson
from shared.vector.query import LayerQuery

__all__ = [
    "CACHE_LIMIT",
    "GeoJsonParams",
    "GeoJsonStream",
    "LinkBuilder",
    "OgcMembers",
    "geojson",
]

CACHE_LIMIT = 8 * 1024 * 1024  # larger GeoJSON answers are streamed, not cached

#: the link to the layer's GeoJSON with these query parameters (the caller's URL scheme)
LinkBuilder = Callable[[Sequence[tuple[str, str]]], str]


@dataclass(frozen=True)
class GeoJsonParams:
    """What a GeoJSON answer is made of, besides the layer."""

    query: LayerQuery
    srid: int
    limit: int
    offset: int
    with_geometry: bool
    debug: bool
    refresh: bool
    """Skip the cache (neither read nor written); a ``debug`` answer skips it too."""

    def link_params(self, offset: int) -> list[tuple[str, str]]:
        """The query parameters of the page at ``offset``, in one form for every request."""
        params = self.query.params()
        if self.srid != 4326:
            params.append(("srid", str(self.srid)))
        if not self.with_geometry:
            params.append(("geom", "0"))
        return [*params, ("limit", str(self.limit)), ("offset", str(offset))]


@dataclass(frozen=True)
class OgcMembers:
    """What an OGC API – Features answer adds: its paging links' media type and titles, its
    other links (the collection), and ``timeStamp`` (when the answer was made)."""

    media_type: str
    links: tuple[dict[str, str], ...] = ()


_TITLES = {"self": "This page", "next": "Next page", "prev": "Previous page"}


@dataclass(frozen=True)
class GeoJsonStream:
    """An answer being read from the database: stream ``body``; ``close`` frees its connection."""

    page: GeoJsonPage
    body: AsyncGenerator[bytes, None]

    @property
    def in_memory(self) -> bool:
        """Whether the whole page was read (it holds no connection): ``body`` only copies."""
        return self.page.conn is None

    async def close(self) -> None:
        """Give the page's connection back; closing twice is harmless."""
        await self.page.close()


async def geojson(
    engine: AsyncEngine,
    cache: VectorCache,
    layer: VectorLayer,
    params: GeoJsonParams,
    link: LinkBuilder,
    *,
    timeout_ms: int,
    buffer_bytes: int,
    filter_timeout_ms: int | None = None,
    ogc: OgcMembers | None = None,
) -> bytes | GeoJsonStream:
    """The layer's features as a GeoJSON FeatureCollection: cached bytes, or a stream.

    Args:
        engine: the async engine of the PostGIS database.
        cache: the cache of vector answers.
        layer: the layer.
        params: the query and the page.
        link: makes the links of the answer (and so its cache key) from query parameters.
        timeout_ms: the statement timeout.
        buffer_bytes: how much of the page is read ahead of the client.
        filter_timeout_ms: the statement timeout of a page a caller's filter picks (None: the
            statement timeout).
        ogc: the members of an OGC API – Features answer (None: none).

    Returns:
        The cached answer, or a stream that fills the cache as it ends (when it may).

    Raises:
        InvalidInputError: an unknown SRID, or a value that does not fit its field.
        UnprocessableError: the layer's data cannot be read.
        UnavailableError: the statement timeout passed, or the database failed.
    """
    use_cache, key = not params.refresh and not params.debug, ""

    def page(at: int, rel: str = "self") -> dict[str, str]:
        shape = {} if ogc is None else {"type": ogc.media_type, "title": _TITLES[rel]}
        return {"rel": rel, **shape, "href": link(params.link_params(at))}

    if use_cache:
        version = await cache.version(engine, layer)
        # the self link holds the path, the normalised parameters and the public URL
        key = cache.key("geojson", layer, version, {"self": page(params.offset)["href"]})
        if (hit := await cache.get(key)) is not None:
            return hit
    features = await open_geojson(
        engine,
        layer,
        params.query,
        srid=params.srid,
        with_geometry=params.with_geometry,
        limit=params.limit,
        offset=params.offset,
        timeout_ms=timeout_ms,
        buffer_bytes=buffer_bytes,
        filter_timeout_ms=filter_timeout_ms,
    )
    offset, limit = params.offset, params.limit
    links = [page(offset)]
    if offset + limit < features.number_matched:
        links.append(page(offset + limit, "next"))
    if offset > 0:
        links.append(page(max(0, offset - limit), "prev"))
    head = {"name": layer.id, "numberMatched": features.number_matched}
    if ogc is not None:
        links += ogc.links
        head["timeStamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    async def body() -> AsyncGenerator[bytes, None]:
        kept: list[bytes] | None = [] if use_cache else None
        size = 0
        try:
            async for chunk in features.body(head, {"links": links}, debug=params.debug):
                data = chunk.encode()
                size += len(data)
                if kept is not None and size <= CACHE_LIMIT:
                    kept.append(data)
                else:
                    kept = None
                yield data
        finally:
            await features.close()
        if kept is not None:
            await cache.put(key, b"".join(kept))

    return GeoJsonStream(features, body())
