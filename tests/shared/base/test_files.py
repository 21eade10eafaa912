"""Atomic writes and links: a file appears whole under its name, or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.base.files import atomic_path, link_atomic, write_atomic


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

    monkeypatch.setattr("shared.base.files.os.replace", full)
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


def test_a_link_is_another_name_of_the_file_that_holds_the_bytes(tmp_path: Path) -> None:
    source, final = tmp_path / "1.png", tmp_path / "2.png"
    written = write_atomic(source, b"sea")
    final.write_bytes(b"old")  # a tile drawn again: the link takes its name

    status = link_atomic(source, final, b"sea")

    assert status is not None
    assert final.read_bytes() == b"sea"
    assert final.stat().st_ino == source.stat().st_ino == status.st_ino
    assert (status.st_nlink, status.st_mtime_ns) == (2, written.st_mtime_ns)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.png", "2.png"]


def test_no_link_to_a_file_replaced_by_other_bytes_or_gone(tmp_path: Path) -> None:
    source, final = tmp_path / "1.png", tmp_path / "2.png"
    final.write_bytes(b"old")
    write_atomic(source, b"land")  # drawn again meanwhile, as another colour

    assert link_atomic(source, final, b"sea") is None
    assert link_atomic(source, final, b"lan") is None  # its beginning is not enough
    assert link_atomic(tmp_path / "gone.png", final, b"sea") is None

    assert final.read_bytes() == b"old"
    assert source.stat().st_nlink == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.png", "2.png"]


def test_a_link_makes_its_folder_but_not_for_a_file_gone(tmp_path: Path) -> None:
    source = tmp_path / "5" / "1.png"
    write_atomic(source, b"sea")

    assert link_atomic(source, tmp_path / "6" / "1.png", b"sea") is not None
    assert link_atomic(tmp_path / "5" / "0.png", tmp_path / "7" / "1.png", b"sea") is None

    assert (tmp_path / "6" / "1.png").stat().st_ino == source.stat().st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == ["5", "6"]


def test_no_link_to_a_symbolic_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"sea")
    source, final = tmp_path / "1.png", tmp_path / "2.png"
    source.symlink_to(outside)  # put in the cache's place by someone else

    assert link_atomic(source, final, b"sea") is None

    assert not final.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.png", "outside.png"]


def test_a_link_made_again_leaves_no_temporary(tmp_path: Path) -> None:
    source, final = tmp_path / "1.png", tmp_path / "2.png"
    write_atomic(source, b"sea")

    first = link_atomic(source, final, b"sea")
    again = link_atomic(source, final, b"sea")  # two runs of one chunk, say

    assert first is not None
    assert again is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.png", "2.png"]
    assert source.stat().st_nlink == 2


def test_no_link_to_a_fifo_and_no_wait_for_its_writer(tmp_path: Path) -> None:
    source, final = tmp_path / "1.png", tmp_path / "2.png"
    os.mkfifo(source)

    assert link_atomic(source, final, b"sea") is None  # at once: never opened for reading

    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.png"]
