"""Elevation (spec 2.9): local DEMs, an Open Topo Data-compatible provider, or both."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from shared.errors import NotFoundError, UpstreamBadAnswerError
from shared.providers.config import Provider
from shared.providers.dem import DemCatalog
from shared.providers.upstream import Upstream, round_coord

__all__ = ["MAX_POINTS", "elevations"]

#: most points of one call (Open Topo Data's own limit)
MAX_POINTS = 100


def _result(dataset: str, elevation: float | None, lon: float, lat: float) -> dict[str, Any]:
    return {"dataset": dataset, "elevation": elevation, "location": {"lat": lat, "lng": lon}}


async def _from_provider(
    upstream: Upstream,
    provider: Provider,
    dataset: str,
    points: list[tuple[float, float]],
    *,
    refresh: bool,
) -> list[dict[str, Any]]:
    locations = "|".join(f"{round_coord(lat)},{round_coord(lon)}" for lon, lat in points)
    try:
        body = await upstream.get_json(
            provider, f"v1/{dataset}", {"locations": locations}, refresh=refresh
        )
    except NotFoundError as exc:  # Open Topo Data answers 400 INVALID_REQUEST for bad points
        raise NotFoundError(f"provider {provider.name}: {exc.message}", **exc.detail) from exc
    results = body.get("results") if isinstance(body, dict) else None
    status = body.get("status") if isinstance(body, dict) else None
    if status != "OK" or not isinstance(results, list) or len(results) != len(points):
        raise UpstreamBadAnswerError(
            f"provider {provider.name}: the answer has no results for the points",
            provider=provider.name,
        )
    out = []
    for (lon, lat), r in zip(points, results, strict=True):
        value = r.get("elevation") if isinstance(r, dict) else None
        if value is not None and (not isinstance(value, int | float) or not math.isfinite(value)):
            raise UpstreamBadAnswerError(
                f"provider {provider.name}: an elevation is not a number", provider=provider.name
            )
        name = str(r.get("dataset") or dataset) if isinstance(r, dict) else dataset
        out.append(_result(name, None if value is None else float(value), lon, lat))
    return out


async def elevations(
    points: list[tuple[float, float]],
    *,
    source: str,
    catalog: DemCatalog,
    upstream: Upstream,
    provider: Provider | None,
    dataset: str,
    refresh: bool = False,
) -> dict[str, Any]:
    """Spec 2.9 for ``(lon, lat)`` points.

    Args:
        points: the points, EPSG:4326.
        source: ``dem`` (local DEMs only), ``opentopodata`` (the provider only) or
            ``dem+opentopodata`` (the provider for the points no local DEM covers).
        catalog: the local DEMs.
        upstream: the provider client.
        provider: the Open Topo Data-compatible provider (None: not configured).
        dataset: the provider's dataset (``srtm90m``…).
        refresh: bypass the provider cache.

    Returns:
        ``{"results": [...], "status": "OK"}``; ``elevation`` null where nothing covers a point.
    """
    results: list[dict[str, Any] | None] = [None] * len(points)
    if source != "opentopodata":
        samples = await asyncio.to_thread(catalog.sample, points)
        for i, ((lon, lat), s) in enumerate(zip(points, samples, strict=True)):
            if s.elevation is not None or source == "dem":
                results[i] = _result(s.dataset or "", s.elevation, lon, lat)
    missing = [i for i, r in enumerate(results) if r is None]
    if missing and provider is None:
        for i in missing:
            results[i] = _result("", None, *points[i])
    elif missing and provider is not None:
        fetched = await _from_provider(
            upstream, provider, dataset, [points[i] for i in missing], refresh=refresh
        )
        for i, r in zip(missing, fetched, strict=True):
            results[i] = r
    return {"results": results, "status": "OK"}
