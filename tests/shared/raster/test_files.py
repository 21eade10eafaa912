"""Atomic writes: a file appears whole under its name, or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.raster.files import atomic_path, write_atomic


def test_a_file_is_written_whole_under_its_name_its_folder_made(tmp_path: Path) -> None:
    final = tmp_path / "a" / "b" / "style.xml"

    status = write_atomic(final, "<Map name='é'/>")

    assert final.read_text() == "<Map name='é'/>"
    assert [p.name for p in final.parent.iterdir()] == ["style.xml"]
    assert (status.st_size, status.st_mtime_ns) == (
        len("<Map name='é'/>".encode()),
        final.stat().st_mtime_ns,
    )


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    final = tmp_path / "7.png"
    final.write_bytes(b"old")

    def full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("shared.raster.files.os.replace", full)
    with pytest.raises(OSError, match="No space"):
        write_atomic(final, b"new")

    assert final.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["7.png"]


def test_the_old_file_stays_until_the_block_ends(tmp_path: Path) -> None:
    final = tmp_path / "out.tif"
    final.write_bytes(b"old")

    with atomic_path(final) as tmp:
        assert tmp.parent == final.parent
        assert tmp.name.startswith(".out.tif.")
        assert tmp.name.endswith(".tmp")
        tmp.write_bytes(b"new")
        assert final.read_bytes() == b"old"

    assert final.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.tif"]


def test_an_error_leaves_the_old_file_and_no_temporary_or_sidecar(tmp_path: Path) -> None:
    final = tmp_path / "out.tif"
    final.write_bytes(b"old")

    def write_then_fail() -> None:
        with atomic_path(final) as tmp:
            tmp.write_bytes(b"half")
            tmp.with_name(tmp.name + ".ovr").write_bytes(b"overviews")  # what GDAL writes beside
            tmp.with_name(tmp.name + ".aux.xml").write_text("<PAMDataset/>")
            raise RuntimeError("cancelled")

    with pytest.raises(RuntimeError, match="cancelled"):
        write_then_fail()

    assert final.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.tif"]
