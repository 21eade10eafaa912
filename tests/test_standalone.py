"""The repository stands alone: nothing refers to a folder beside the checkout, and the demo
data the suite, ``make run`` and the Docker image read is inside it, described and shipped."""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

from shared.demo import DEMO_DATA
from tests.conftest import ROOT

#: ways to reach the old ``shared`` folder beside the checkout (its data, its spec and design
#: pages); the project's own package ``shared/`` is reached by none of them
OUTSIDE = re.compile(
    rb"\.\./shared"  # ../shared/data, ../shared/spec/…, ../shared/DESIGN.md
    rb'|"shared"\s*/\s*"data"'  # parents[2] / "shared" / "data"
    rb'|\.parents?(\[[0-9]+\])?\s*/\s*"shared"'  # ROOT.parent / "shared"
    rb"|shared/(data|spec|DESIGN)"  # the same paths written without the ../
)


def _project_files() -> list[str]:
    """The files git tracks, and new ones it does not ignore (what a commit would hold)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    return sorted({name for name in listed.decode().split("\0") if (ROOT / name).is_file()})


def _demo_files() -> list[str]:
    """The files of the demo data folder, relative to the repository."""
    return sorted(str(p.relative_to(ROOT)) for p in DEMO_DATA.rglob("*") if p.is_file())


def _outside_references(name: str) -> list[str]:
    """``<file>:<line>: <reference>`` for each reference of the file to the outside folder."""
    data = (ROOT / name).read_bytes()
    found = []
    for match in OUTSIDE.finditer(data):
        line = data.count(b"\n", 0, match.start()) + 1
        found.append(f"{name}:{line}: {match.group().decode()}")
    return found


def test_nothing_refers_to_a_folder_beside_the_checkout() -> None:
    this = str(Path(__file__).resolve().relative_to(ROOT))  # its examples are the old paths
    found = [ref for name in _project_files() if name != this for ref in _outside_references(name)]
    assert found == []


def test_the_pattern_catches_the_old_references_and_spares_the_package() -> None:
    old = [
        "see ../shared/DESIGN.md",
        'ROOT.parent / "shared" / "data"',
        'Path(__file__).resolve().parents[2] / "shared"',
        "the ``shared/data`` folder",
    ]
    assert all(OUTSIDE.search(line.encode()) for line in old)
    ours = ["from shared.demo import DEMO_DATA", "shared/demo.py", "tests/shared/raster/"]
    assert not any(OUTSIDE.search(line.encode()) for line in ours)


def test_the_demo_data_is_in_the_repository_and_not_ignored() -> None:
    assert DEMO_DATA == ROOT / "deploy" / "demo-data"
    files = _demo_files()
    for needed in (
        "raster/single/RGB.byte.tif",
        "raster/bahamas-tiles/rgb1.tif",
        "raster/broken/corrupt.tif",
        "dem/N10W110.hgt.zip",
        "vector/naturalearth_lowres/naturalearth_lowres.shp",
    ):
        assert str(DEMO_DATA.relative_to(ROOT) / needed) in files, needed
    assert set(files) <= set(_project_files())  # git would commit them
    patterns = [
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for name in files:  # the image's build context holds them
        parents = [str(p) for p in Path(name).parents if str(p) != "."]
        assert not any(
            fnmatch.fnmatch(path, pattern) for path in [name, *parents] for pattern in patterns
        )


def test_the_readme_of_the_demo_data_names_every_file_and_its_licence() -> None:
    readme = (DEMO_DATA / "README.md").read_text()
    for name in _demo_files():
        path = Path(name).relative_to(DEMO_DATA.relative_to(ROOT))
        if path.name != "README.md":
            # a file by its name, or the folder of a shapefile's parts
            assert path.name in readme or f"`{path.parent}/`" in readme, path
    for licence in ("CC0 1.0", "public domain", "rasterio", "Natural Earth", "SRTM"):
        assert licence in readme, licence


def test_the_image_carries_the_demo_data_where_the_setting_points() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "COPY deploy/demo-data ./deploy/demo-data" in dockerfile
    assert "WORKDIR /app" in dockerfile
    assert "ENV MAPSVC_DEMO_DATA_DIR=/app/deploy/demo-data" in dockerfile
