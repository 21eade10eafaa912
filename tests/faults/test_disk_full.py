"""The tile cache's disk full: tiles are still served (rendered), the failed write is logged, no
truncated file is left; with room again, tiles are cached again."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.settings import Settings
from tests.faults.conftest import Api
from tests.faults.harness import assert_png
from tests.layers import tile_url

pytestmark = [pytest.mark.server]

#: tiles of the Landsat scene that no other test asks for (the cache is a new file system)
TILES = [(11, 578, 882), (11, 579, 882), (11, 578, 883)]
#: room left on the full disk: a tile's write begins, then fails (tmpfs counts 4 KiB pages)
LEFT = 8192


@pytest.fixture
def small_cache(fault_settings: Settings) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted on the tile cache folder (unmounted after the test)."""
    root = fault_settings.dirs.rtile
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(root)], check=True)
    try:
        yield root
    finally:
        if subprocess.run(["umount", str(root)], check=False).returncode != 0:
            subprocess.run(["umount", "--lazy", str(root)], check=True)


def write_forever(fd: int) -> None:
    block = b"\0" * 65536
    while True:
        os.write(fd, block)


def fill(path: Path, leave: int) -> None:
    """Write ``path`` until the disk is full, then free ``leave`` bytes of it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        with pytest.raises(OSError, match=f"\\[Errno {errno.ENOSPC}\\]"):
            write_forever(fd)
        size = os.lseek(fd, 0, os.SEEK_CUR)
    finally:
        os.close(fd)
    os.truncate(path, max(0, size // 4096 * 4096 - leave))


def files_in(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_disk_full_while_caching(
    fault_api: Api, fault_settings: Settings, rgb_layer: str, small_cache: Path
) -> None:
    api = fault_api.client
    filler = small_cache / "filler"
    fill(filler, LEFT)
    log_before = len(fault_api.process.output())
    served = {}
    for z, x, y in TILES:
        r = api.get(tile_url(rgb_layer, z, x, y))
        assert r.status_code == 200, r.text
        assert r.headers["x-cache"] == "MISS"
        assert "x-tile-empty" not in r.headers  # rendered from the raster
        assert_png(r.content, f"tile {z}/{x}/{y} served with the disk full")
        served[z, x, y] = r.content
    # nothing but the filler: no tile under its name, no temporary file left behind
    assert files_in(small_cache) == {"filler"}
    log = fault_api.process.output()[log_before:]
    assert "No space left on device" in log, fault_api.process.tail()
    assert "tile cache" in log
    # room again: the next request renders the tile and caches it whole, the one after reads it
    filler.unlink()
    z, x, y = TILES[0]
    r = api.get(tile_url(rgb_layer, z, x, y))
    assert (r.status_code, r.headers["x-cache"]) == (200, "MISS")
    key = f"{rgb_layer}/en/{z}/{x}/{y}.png"
    assert files_in(small_cache) == {key}
    assert (small_cache / key).read_bytes() == r.content == served[z, x, y]
    r = api.get(tile_url(rgb_layer, z, x, y))
    assert (r.status_code, r.headers["x-cache"], r.content) == (200, "HIT", served[z, x, y])
