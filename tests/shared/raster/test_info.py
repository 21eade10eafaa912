"""raster_info against what ``gdalinfo -json`` (Debian's gdal-bin 3.6) prints for the same files."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from shared.demo import DEMO_DATA
from shared.errors import NotFoundError, UnprocessableError
from shared.raster.info import raster_info
from tests.checks import assert_same

RASTERS = DEMO_DATA / "raster"
DEMO_RASTERS = sorted(
    str(p.relative_to(RASTERS)) for p in RASTERS.rglob("*.tif") if p.parent.name != "broken"
)
#: files made in the test from copies: a VRT mosaic, internal and external overviews, an
#: internal mask with overviews, statistics in a .aux.xml sidecar, GCPs instead of a
#: geotransform, no georeferencing at all, degrees with a float nodata, scale and offset
MADE_RASTERS = [
    "mosaic.vrt",
    "overviews.tif",
    "external-ovr.tif",
    "mask.tif",
    "stats.tif",
    "gcps.tif",
    "plain.tif",
    "degrees.tif",
]


def gdalinfo(path: Path) -> dict[str, Any]:
    done = subprocess.run(
        ["gdalinfo", "-json", str(path)], capture_output=True, text=True, check=True, timeout=30
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Copies of the demo rasters, and the rasters made from them with GDAL's tools."""
    root = tmp_path_factory.mktemp("rasters")
    for source in (p for p in RASTERS.rglob("*") if p.is_file()):  # read-only: bytes only
        copy = root / source.relative_to(RASTERS)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)

    def run(*args: str) -> None:
        subprocess.run(args, cwd=root, check=True, capture_output=True, timeout=60)

    tiles = sorted(str(p.relative_to(root)) for p in (root / "bahamas-tiles").glob("*.tif"))
    run("gdalbuildvrt", "mosaic.vrt", *tiles)
    for name in ("overviews.tif", "external-ovr.tif"):
        shutil.copyfile(root / "single" / "RGB.byte.tif", root / name)
    shutil.copyfile(root / "single" / "world.rgb.tif", root / "stats.tif")  # has none yet
    run("gdaladdo", "-q", "overviews.tif", "2", "4", "8")
    run("gdaladdo", "-q", "-ro", "external-ovr.tif", "2", "4")
    run("gdalinfo", "-stats", "stats.tif")  # writes stats.tif.aux.xml
    run(
        "gdal_translate", "-q", "-mask", "1", "-co", "TILED=YES",
        "--config", "GDAL_TIFF_INTERNAL_MASK", "YES", "single/RGB.byte.tif", "mask.tif",
    )  # fmt: skip
    run("gdaladdo", "-q", "mask.tif", "2", "4")
    run(
        "gdal_translate", "-q", "-a_srs", "EPSG:4326",
        "-gcp", "0", "0", "-78", "25", "-gcp", "400", "0", "-77", "25",
        "-gcp", "0", "400", "-78", "24", "bahamas-tiles/rgb1.tif", "gcps.tif",
    )  # fmt: skip
    run("gdal_create", "-q", "-outsize", "20", "10", "-ot", "Int64", "-a_nodata", "-5", "plain.tif")
    run(
        "gdal_translate", "-q", "-a_srs", "EPSG:4326", "-a_ullr", "10.123456789", "20.987654321",
        "11.5", "19.25", "-ot", "Float32", "-a_nodata", "-9999.5", "-a_scale", "0.5",
        "-a_offset", "10", "single/shade.tif", "degrees.tif",
    )  # fmt: skip
    return root


def test_the_shared_rasters_are_there() -> None:
    assert len(DEMO_RASTERS) >= 7


@pytest.mark.parametrize("name", DEMO_RASTERS + MADE_RASTERS)
def test_matches_gdalinfo(work: Path, name: str) -> None:
    path = work / name
    before = sorted(work.rglob("*"))
    theirs = gdalinfo(path)

    ours = raster_info(path)

    assert_same(ours, theirs)
    assert json.loads(json.dumps(ours)) == ours
    assert sorted(work.rglob("*")) == before  # nothing written, no .aux.xml


def test_files_list_sidecars_and_sources(work: Path) -> None:
    assert raster_info(work / "mosaic.vrt")["files"] == [
        str(work / "mosaic.vrt"),
        *(str(work / "bahamas-tiles" / f"rgb{i}.tif") for i in range(1, 5)),
    ]
    ovr = work / "external-ovr.tif"
    assert raster_info(ovr)["files"] == [str(ovr), f"{ovr}.ovr"]
    stats = work / "stats.tif"
    assert raster_info(stats)["files"] == [str(stats), f"{stats}.aux.xml"]


def test_mask_with_overviews(work: Path) -> None:
    band = raster_info(work / "mask.tif")["bands"][0]

    assert band["mask"] == {
        "flags": ["PER_DATASET"],
        "overviews": [{"size": [396, 359]}, {"size": [198, 180]}],
    }


def test_crs_does_not_depend_on_the_file_read_before(work: Path) -> None:
    alone = raster_info(work / "single" / "world.rgb.tif")
    raster_info(work / "single" / "RGB.byte.tif")

    assert raster_info(work / "single" / "world.rgb.tif") == alone
    assert "ENSEMBLE[" in alone["coordinateSystem"]["wkt"]


def test_description_is_the_path_as_given(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(work)

    info = raster_info(Path("single/shade.tif"))

    assert info["description"] == "single/shade.tif"
    assert info["files"] == ["single/shade.tif"]


def test_corrupt_raster_is_unprocessable_with_gdals_words(work: Path) -> None:
    path = work / "broken" / "corrupt.tif"

    with pytest.raises(UnprocessableError) as caught:
        raster_info(path)

    message = caught.value.message
    assert message.startswith(f"{path}: ")
    assert "IReadBlock failed at X offset 1, Y offset 1" in message
    assert "TIFFReadEncodedTile() failed" in message
    assert "got 38232 bytes, expected 47086" in message
    assert caught.value.detail == {"path": str(path)}


def test_not_a_raster_is_unprocessable(tmp_path: Path) -> None:
    path = tmp_path / "notes.tif"
    path.write_text("not a raster")

    with pytest.raises(UnprocessableError, match="not recognized as being in a supported"):
        raster_info(path)


def test_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError) as caught:
        raster_info(tmp_path / "missing.tif")

    assert caught.value.detail == {"path": str(tmp_path / "missing.tif")}
