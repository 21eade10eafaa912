"""``mapsvc truncate`` and ``mapsvc expire``: jobs of the API, run by a real worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.base.formats import TileVariant
from shared.base.grid import TileAddress
from shared.seeding.coverage import Coverage
from shared.settings import Settings
from tests.api.test_expiry import T9, family
from tests.api.test_truncate import BOX, LANGS, around, fill, keys_of, meeting, on_disk
from tests.checks import ADMIN_KEY
from tests.layers import RGB, own_layer

pytestmark = pytest.mark.worker


def mapsvc(*argv: str, url: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``mapsvc <argv> --url <url>/api/v1`` as the admin."""
    env = {**os.environ, "MAPSVC_KEY": ADMIN_KEY}
    command = [sys.executable, "-m", "api.cli", *argv, "--url", f"{url}/api/v1"]
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, env=env, timeout=120
    )


@pytest.fixture
def scene(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, request: pytest.FixtureRequest
) -> str:
    return own_layer(settings, rdb, RGB, "cli-cache", f"{request.node.name[:40]}.tif")


def test_truncate_prints_the_plan_then_removes_the_tiles(
    live_server: str, settings: Settings, scene: str, worker: Any
) -> None:
    root = settings.dirs.rtile
    tiles = around(range(9, 11))
    made = fill(root, scene, tiles)
    box = ",".join(map(str, BOX))
    dry = mapsvc(
        "truncate",
        scene,
        f"--bbox={box}",  # (=: a box starting with a minus is no option)
        "--minzoom",
        "9",
        "--maxzoom",
        "11",
        "--dryrun",
        url=live_server,
    )
    assert dry.returncode == 0, dry.stderr
    coverage = Coverage.box(BOX)
    assert dry.stdout.splitlines() == [
        f"zoom 9: {coverage.count(9)} tiles",
        f"zoom 10: {coverage.count(10)} tiles",
        f"total: {(coverage.count(9) or 0) + (coverage.count(10) or 0)} tiles",
    ]
    assert on_disk(root, scene) == made
    run = mapsvc(
        "truncate",
        scene,
        f"--bbox={box}",  # (=: a box starting with a minus is no option)
        "--minzoom",
        "9",
        "--maxzoom",
        "11",
        "--tile-format",
        "png,webp@2x",
        "--lang",
        "en",
        url=live_server,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    variants = (TileVariant.from_name("png"), TileVariant.from_name("webp@2x"))
    gone = keys_of(scene, meeting(coverage, tiles, range(9, 11)), ("en",), variants)
    assert on_disk(root, scene) == made - gone
    assert any(line.startswith("Zoom 9: ") for line in run.stdout.splitlines()), run.stdout
    assert run.stdout.splitlines()[-1] == "Finish:success"


def test_expire_sends_an_expire_file_or_stdin(
    live_server: str, settings: Settings, scene: str, tmp_path: Path, worker: Any
) -> None:
    root = settings.dirs.rtile
    tiles = around(range(8, 11))
    made = fill(root, scene, tiles)
    listed = tmp_path / "expire.list"
    listed.write_text(f"{T9.z}/{T9.x}/{T9.y}\n")
    run = mapsvc("expire", scene, str(listed), url=live_server)
    assert run.returncode == 0, run.stdout + run.stderr
    gone = keys_of(scene, family(tiles, T9))
    assert on_disk(root, scene) == made - gone
    per_zoom = len(LANGS) * 6
    assert f"Zoom 10: {4 * per_zoom} tiles removed" in run.stdout
    # from the standard input, as a JSON array; a bad one names its line and removes nothing
    other = TileAddress(9, T9.x - 2, T9.y)
    piped = mapsvc(
        "expire", scene, "-", url=live_server, stdin=f'["{other.z}/{other.x}/{other.y}"]'
    )
    assert piped.returncode == 0, piped.stderr
    assert on_disk(root, scene) == made - gone - keys_of(scene, family(tiles, other))
    left = on_disk(root, scene)
    listed.write_text("8/1/1\n8/1/x\n")
    bad = mapsvc("expire", scene, str(listed), url=live_server)
    assert bad.returncode == 2
    assert "line 2" in bad.stderr
    assert on_disk(root, scene) == left
    missing = mapsvc("expire", scene, str(tmp_path / "nosuch"), url=live_server)
    assert missing.returncode == 2
    assert "nosuch" in missing.stderr
