"""The tiling speed test (spec 4.7): a fixed sample of tiles per zoom, cold and cached."""

from __future__ import annotations

import statistics
import time
from typing import Any

from shared.base.grid import MAX_ZOOM, TileAddress
from shared.errors import UnavailableError
from shared.jobs import JobReporter
from shared.seeding.plan import chunks, plan_pretile
from shared.tiles.render import TileRenderer
from shared.tiles.store import TileStore, tile_key
from shared.tiles.styles import read_style

__all__ = ["SAMPLE_PER_ZOOM", "speed_test"]

SAMPLE_PER_ZOOM = 12
_ZOOMS_BELOW, _ZOOMS_ABOVE = 4, 1


def _sample(bounds: list[float], z: int) -> list[TileAddress]:
    """Up to SAMPLE_PER_ZOOM tiles of zoom ``z``, spread evenly over the footprint."""
    plan = plan_pretile(bounds, z, z + 1)
    tiles = [t for chunk in chunks(bounds, plan) for t in chunk.tiles()]
    step = max(1, len(tiles) // SAMPLE_PER_ZOOM)
    return tiles[::step][:SAMPLE_PER_ZOOM]


def _stats(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    total_s = sum(ms) / 1000
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(p95, 2),
        "tiles_per_s": round(len(ms) / total_s, 1) if total_s > 0 else 0.0,
    }


def speed_test(
    renderer: TileRenderer, store: TileStore, style: str, lang: str, report: JobReporter
) -> dict[str, Any]:
    """Render a sample of tiles at several zooms around the layer's own, cold and cached.

    Cold: each tile is rendered (the cache is not read). Cached: the same tile stored, then
    read back from the tile cache. One line per zoom, then the summary as one JSON line.

    Returns:
        ``style``, ``lang``, ``sample_per_zoom`` and ``zooms``: per zoom the tiles sampled and
        ``cold``/``cached`` p50/p95 ms and tiles per second.
    """
    info = read_style(renderer.mapnik_dir, style)
    bounds = info.footprint
    top = min(MAX_ZOOM, (info.zoom if info.zoom is not None else 10) + _ZOOMS_ABOVE)
    zooms = range(max(0, top - _ZOOMS_BELOW - _ZOOMS_ABOVE), top + 1)
    report.line(f"Speed test: {style}, zooms {zooms[0]}-{zooms[-1]}, {SAMPLE_PER_ZOOM} tiles each")
    results = []
    for i, z in enumerate(zooms, start=1):
        tiles = _sample(bounds, z)
        cold, cached = [], []
        for tile in tiles:
            t0 = time.perf_counter()
            rendered = renderer.render_tile(style, lang, tile)
            cold.append((time.perf_counter() - t0) * 1000)
            key = tile_key(style, lang, tile)
            store.put(key, rendered.data)
            t0 = time.perf_counter()
            if store.get(key) != rendered.data:
                raise UnavailableError(f"the tile cache did not give back tile {key}")
            cached.append((time.perf_counter() - t0) * 1000)
        entry: dict[str, Any] = {
            "zoom": z,
            "tiles": len(tiles),
            "cold": _stats(cold),
            "cached": _stats(cached),
        }
        results.append(entry)
        c, h = entry["cold"], entry["cached"]
        report.line(
            f"Zoom {z}: {len(tiles)} tiles, cold p50 {c['p50_ms']} ms p95 {c['p95_ms']} ms "
            f"{c['tiles_per_s']} tiles/s; cached p50 {h['p50_ms']} ms p95 {h['p95_ms']} ms "
            f"{h['tiles_per_s']} tiles/s",
            progress=i / len(zooms),
        )
    summary = {"style": style, "lang": lang, "sample_per_zoom": SAMPLE_PER_ZOOM, "zooms": results}
    report.json(summary)
    return summary
