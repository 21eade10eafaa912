"""A process that draws metatiles keeps their memory: no fresh pages for each metatile."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

#: draws and cuts 8 metatiles of the demo countries at zoom 5 (2,304 px squares, with their
#: buffer), as a worker process does; prints the page faults of the last 6 (minor faults: the
#: 10th field of ``/proc/self/stat``)
_PROGRAM = """
import sys, tempfile
from pathlib import Path
from shared.memory import keep_image_memory
from shared.base.encoding import PNG_CODEC
from shared.tiles.metatile import Metatile
from shared.tiles.render import TileRenderer
from tests.styles import write_countries

if sys.argv[1] == "keep":
    assert keep_image_memory()
def faults():
    return int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[7])
folder = Path(tempfile.mkdtemp())
_, style = write_countries(folder)
blocks = [Metatile(5, x, y, x + 7, y + 7) for y in (8, 16) for x in (0, 8, 16, 24)]
with TileRenderer(folder) as renderer:
    for i, block in enumerate(blocks):
        if i == 2:
            start = faults()
        tiles = list(block.tiles())
        for _ in renderer.render_metatile(style, "en", block, tiles, PNG_CODEC, 1, 128):
            pass
print(faults() - start)
"""


def faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _PROGRAM, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's malloc, /proc",
)
def test_a_metatiles_memory_is_reused_instead_of_faulted_in_again() -> None:
    image_pages = 2304 * 2304 * 4 // 4096  # of one metatile's image

    default, kept = faults("default"), faults("keep")

    assert default >= 6 * image_pages  # fresh pages for each metatile, its image at least
    assert kept < image_pages // 4  # the first metatiles' pages, reused
