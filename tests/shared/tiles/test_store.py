"""The tile caches: keys, the file store (whole tiles only), and the stores a setting names."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from shared.base.grid import TileAddress
from shared.errors import InvalidInputError, UnavailableError
from shared.settings import Settings
from shared.tiles.store import STALE_WRITE_S, FileTileStore, tile_key
from shared.tiles.stores import s3_store, tile_stores

KEY = tile_key("c2NlbmUudGlm", "en", TileAddress(3, 2, 1))


def test_a_stored_tile_is_read_back_and_replaced_whole(tmp_path: Path) -> None:
    assert KEY == "c2NlbmUudGlm/en/3/2/1.png"  # style, language, z/x/y
    store = FileTileStore(tmp_path)
    assert store.get(KEY) is None
    assert not store.exists(KEY)

    store.put(KEY, b"\x89PNG first")
    assert store.get(KEY) == b"\x89PNG first"
    assert store.exists(KEY)
    assert (tmp_path / "c2NlbmUudGlm" / "en" / "3" / "2" / "1.png").read_bytes() == b"\x89PNG first"

    store.put(KEY, b"\x89PNG second, longer")
    assert store.get(KEY) == b"\x89PNG second, longer"
    assert [p.name for p in (tmp_path / "c2NlbmUudGlm" / "en" / "3" / "2").iterdir()] == ["1.png"]


def test_a_write_that_fails_midway_leaves_the_old_tile_and_no_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileTileStore(tmp_path)
    store.put(KEY, b"old tile")

    real_fdopen = os.fdopen

    class HalfThenFail(io.BufferedWriter):
        def write(self, data: bytes) -> int:  # type: ignore[override]
            super().write(data[: len(data) // 2])
            self.flush()
            raise OSError(28, "No space left on device")

    def fdopen(fd: int, mode: str) -> io.BufferedWriter:
        return HalfThenFail(real_fdopen(fd, "wb", buffering=0))

    with monkeypatch.context() as patch:
        patch.setattr("shared.base.files.os.fdopen", fdopen)
        with pytest.raises(OSError, match="No space left"):
            store.put(KEY, b"new tile, never whole")

    assert store.get(KEY) == b"old tile"
    assert [p.name for p in (tmp_path / "c2NlbmUudGlm" / "en" / "3" / "2").iterdir()] == ["1.png"]


def test_dropping_a_style_removes_its_tiles_only(tmp_path: Path) -> None:
    store = FileTileStore(tmp_path / "rtile")
    for style in ("a", "b"):
        store.put(tile_key(style, "en", TileAddress(0, 0, 0)), style.encode())

    store.drop_style("a")
    store.drop_style("never-stored")

    assert sorted(p.name for p in (tmp_path / "rtile").iterdir()) == ["b"]
    for unsafe in ("", "..", "b/en", "."):
        with pytest.raises(InvalidInputError):
            store.drop_style(unsafe)
    assert store.get(tile_key("b", "en", TileAddress(0, 0, 0))) == b"b"


def test_without_object_storage_the_file_cache_is_the_only_store(tmp_path: Path) -> None:
    settings = Settings(work_dir=tmp_path, s3_endpoint_url=None, _env_file=None)

    with tile_stores(settings) as stores:
        assert stores.s3 is None
        assert stores.file.root == settings.dirs.rtile
        assert stores.pick(False) is stores.file
        assert stores.all() == [stores.file]
        with pytest.raises(UnavailableError, match="object storage is not configured"):
            stores.pick(True)
    with pytest.raises(UnavailableError, match="object storage is not configured"):
        s3_store(settings)


def test_temporary_files_of_dead_writes_are_no_tiles_and_are_swept_by_age(
    tmp_path: Path,
) -> None:
    """A write killed midway leaves ``.<y>.png.<hex>.tmp``: listings (truncation, expiry, the
    cache walk) never name it; one older than an hour is removed as its folder is listed, a
    recent one (a write going on) stays."""
    store = FileTileStore(tmp_path)
    key = tile_key("style", "en", TileAddress(3, 2, 1))
    store.put(key, b"tile")
    folder = (tmp_path / key).parent
    stale, going = folder / ".1.png.0badf00d.tmp", folder / ".1.png.1badf00d.tmp"
    for path in (stale, going):
        path.write_bytes(b"half a til")
    old = stale.stat().st_mtime - STALE_WRITE_S - 60
    os.utime(stale, (old, old))

    assert store.names(key.rsplit("/", 1)[0]) == ["1.png"]
    assert not stale.exists()
    assert going.exists()
    assert store.get(key) == b"tile"
