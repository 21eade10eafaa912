"""Raster paths and ids: one spelling per raster, nothing outside the raster root."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.errors import InvalidInputError, NotFoundError
from shared.raster.paths import (
    MAX_PATH_BYTES,
    decode_id,
    encode_id,
    is_raster_file,
    normalise_path,
    relative,
    resolve,
)


@pytest.mark.parametrize(
    ("spelling", "normal"),
    [
        ("a", "a"),
        ("./a", "a"),
        ("a/", "a"),
        ("a//b", "a/b"),
        ("./a/./b/", "a/b"),
        ("é/ü", "é/ü"),
        ("é" * 90, "é" * 90),  # the longest: 180 bytes
    ],
)
def test_spellings_of_a_path_have_one_normal_form(spelling: str, normal: str) -> None:
    assert normalise_path(spelling) == normal


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("", "not the folder itself"),
        ("./", "not the folder itself"),
        ("//", "not the folder itself"),
        ("a/../b", "no '..'"),
        ("..", "no '..'"),
        ("a\\b", "no backslash or NUL"),
        ("a\x00b", "no backslash or NUL"),
        ("é" * 91, f"at most {MAX_PATH_BYTES} bytes"),  # 182 bytes in 91 characters
    ],
)
def test_paths_that_are_not_a_raster_in_the_root_are_refused(path: str, words: str) -> None:
    with pytest.raises(InvalidInputError, match=words):
        normalise_path(path)


def test_an_id_is_unpadded_urlsafe_base64_of_the_path() -> None:
    assert encode_id("single/RGB.byte.tif") == "c2luZ2xlL1JHQi5ieXRlLnRpZg"
    assert decode_id("c2luZ2xlL1JHQi5ieXRlLnRpZg") == "single/RGB.byte.tif"
    assert decode_id("c2luZ2xlL1JHQi5ieXRlLnRpZg==") == "single/RGB.byte.tif"  # padding taken
    assert encode_id("ö/?~") == "w7YvP34"  # '-' and '_', never '+' and '/'
    assert decode_id(encode_id("é" * 90)) == "é" * 90


@pytest.mark.parametrize(
    ("raster_id", "words"),
    [
        ("", "at most 180 bytes"),
        ("a" * 241, "at most 180 bytes"),
        ("!!notbase64", "URL-safe base64 of a path"),
        ("c2luZ2xlL1JHQi5ieXRlLnRpZh", "URL-safe base64 of a path"),  # not canonical
        (encode_id("./single/x.tif"), f"its id is {encode_id('single/x.tif')}"),
        (encode_id("../etc/passwd"), "no '..'"),
    ],
)
def test_an_id_of_no_normal_path_is_refused(raster_id: str, words: str) -> None:
    with pytest.raises(InvalidInputError, match=words):
        decode_id(raster_id)


def test_resolve_stays_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "raster"
    (root / "single").mkdir(parents=True)
    (root / "single" / "a.tif").write_bytes(b"II*\x00")
    (tmp_path / "outside.tif").write_bytes(b"II*\x00")
    (root / "escape.tif").symlink_to(tmp_path / "outside.tif")

    assert resolve(root, "single/a.tif") == (root / "single" / "a.tif").resolve()
    assert resolve(root, "") == root.resolve()
    assert resolve(root, "single/new.tif", must_exist=False) == (root / "single" / "new.tif")
    assert relative(root, resolve(root, "single/a.tif")) == "single/a.tif"
    assert relative(root, resolve(root, "")) == ""
    with pytest.raises(InvalidInputError, match="leads outside the raster folder"):
        resolve(root, "escape.tif")
    with pytest.raises(InvalidInputError, match="without '..'"):
        resolve(root, "/etc/passwd")
    with pytest.raises(NotFoundError, match="no file 'single/b.tif' in the raster folder"):
        resolve(root, "single/b.tif")


def test_a_raster_file_is_known_by_its_suffix_and_first_bytes(tmp_path: Path) -> None:
    files = {
        "le.tif": b"II*\x00rest",
        "be.TIFF": b"MM\x00*rest",
        "big.tif": b"II+\x00rest",
        "mosaic.vrt": b'\n  <VRTDataset rasterXSize="1">',
        "text.tif": b"not a raster",
        "image.png": b"II*\x00 but a png name",
        "html.vrt": b"<html>",
    }
    for name, head in files.items():
        (tmp_path / name).write_bytes(head)
    (tmp_path / "folder.tif").mkdir()

    found = sorted(p.name for p in tmp_path.iterdir() if is_raster_file(p))

    assert found == ["be.TIFF", "big.tif", "le.tif", "mosaic.vrt"]
