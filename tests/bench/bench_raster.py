"""Benchmark: raster info against ``gdalinfo -json``, compression against ``gdal_translate``.

Run from the checkout with ``make bench`` (or ``.venv/bin/python -m tests.bench.bench_raster``).
It copies the demo rasters into a temporary folder, adds a larger synthetic scene
(4096 x 4096 RGB) so that compression is measured on real work rather than start-up, and
prints medians and ratios (peer time / mapsvc time for info; mapsvc / peer for compression).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import rasterio

from shared.demo import DEMO_DATA
from shared.raster.compress import compress_file
from shared.raster.info import raster_info
from shared.raster.paths import encode_id
from shared.raster.queries import ResultCache, raster_info_of
from shared.redis_clients import sync_client
from tests.peers import TRANSLATE


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def big_scene(path: Path, source: Path, size: int = 4096) -> None:
    """A size x size RGB scene made by tiling a real one (real image content compresses as such)."""
    with rasterio.open(source) as src:
        data = src.read()
        profile = src.profile
    reps = (1, -(-size // data.shape[1]), -(-size // data.shape[2]))
    tiled = np.tile(data, reps)[:, :size, :size]
    profile.update(
        width=size, height=size, compress="deflate", tiled=True, blockxsize=256, blockysize=256
    )
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(tiled)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per measurement")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/11", help="Redis for the cache")
    args = parser.parse_args()
    cache = ResultCache(sync_client(args.redis), ttl_s=60, max_bytes=2**26)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root = work / "map" / "raster"
        shutil.copytree(DEMO_DATA / "raster", root)
        big_scene(root / "single" / "big4096.tif", root / "single" / "RGB.byte.tif")
        files = sorted(p for p in root.rglob("*.tif") if p.parent.name != "broken")
        print(
            "gis-raster-info vs gdalinfo -json (median ms; ratio = gdalinfo / mapsvc)\n"
            "first: the first read of a file (a new reader thread); uncached: later reads of it;"
            " cached: the Redis-cached answer"
        )
        print(
            f"{'file':32} {'gdalinfo':>9} {'first':>7} {'uncached':>9} {'cached':>7}"
            f" {'x first':>8} {'x uncached':>11} {'x cached':>9}"
        )
        for path in files:
            rel = path.relative_to(root).as_posix()
            peer = median_ms(
                lambda p=path: subprocess.run(
                    ["gdalinfo", "-json", str(p)], check=True, capture_output=True
                ),
                args.runs,
            )
            t0 = time.perf_counter()
            raster_info(path)
            first = (time.perf_counter() - t0) * 1000
            ours = median_ms(lambda p=path: raster_info(p), args.runs)
            cached = median_ms(
                lambda r=rel: raster_info_of(cache, work, encode_id(r), None),
                args.runs,
            )
            print(
                f"{rel:32} {peer:9.2f} {first:7.2f} {ours:9.2f} {cached:7.2f} {peer / first:7.1f}x"
                f" {peer / ours:10.1f}x {peer / cached:8.1f}x"
            )
        print(
            "\ngis-layer-compress vs gdal_translate, same options (median ms; ratio = mapsvc /"
            " gdal_translate, target <= 1.1)"
        )
        for path in [root / "single" / "RGB.byte.tif", root / "single" / "big4096.tif"]:
            out = work / "out"
            out.mkdir(exist_ok=True)
            runs = max(3, args.runs // 4)
            peer = median_ms(
                lambda p=path, o=out: subprocess.run(
                    [*TRANSLATE, str(p), str(o / "peer.tif")], check=True
                ),
                runs,
            )
            ours = median_ms(lambda p=path, o=out: compress_file(p, o / "ours.tif"), runs)
            print(
                f"{path.name:32} gdal_translate {peer:8.1f}  mapsvc {ours:8.1f}"
                f"  ratio {ours / peer:.2f}"
            )


if __name__ == "__main__":
    main()
