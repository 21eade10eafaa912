"""A pre-tiling chunk's tiles: rendered, stored by the writer thread, counted once stored."""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared.base.encoding import Codec
from shared.base.grid import TileAddress
from shared.base.png import Rendered
from shared.errors import UnavailableError, UnprocessableError
from shared.seeding.plan import Chunk
from shared.seeding.pretile_run import PretileJob, PretileRunner
from shared.tiles.metatile import Metatile
from shared.tiles.store import FileTileStore, StoredTile, tile_key

CHUNK = Chunk(10, 4, 6, 5, 7)  # 2 x 2 tiles


class FakeRenderer:
    """Renders a tile as its address; tiles of column 5 are empty; ``fail_at`` raises.

    Its layer's metatiles are ``size`` tiles a side (1: tile by tile); a metatile holding
    ``fail_at`` fails whole, as one Mapnik render would.
    """

    def __init__(self, fail_at: TileAddress | None = None, size: int = 1) -> None:
        self.fail_at = fail_at
        self.size = size
        self.rendered: list[TileAddress] = []
        self.blocks: list[tuple[Metatile, list[TileAddress], int]] = []

    def metatile_size(self, style: str, lang: str, default: int) -> int:
        return self.size

    def render_metatile(
        self,
        style: str,
        lang: str,
        block: Metatile,
        tiles: Sequence[TileAddress],
        codec: Codec,
        scale: int = 1,
        buffer: int = 0,
    ) -> Iterator[tuple[TileAddress, Rendered]]:
        self.blocks.append((block, list(tiles), buffer))
        if self.fail_at in tiles:
            raise UnprocessableError("the raster of style 's' is gone")
        for tile in tiles:
            yield tile, self.render_tile(style, lang, tile, codec, scale)

    def render_tile(
        self, style: str, lang: str, tile: TileAddress, codec: Codec, scale: int = 1
    ) -> Rendered:
        if tile == self.fail_at:
            raise UnprocessableError("the raster of style 's' is gone")
        self.rendered.append(tile)
        return Rendered(f"{style}/{lang}/{tile.z}/{tile.x}/{tile.y}".encode(), tile.x == 5)


class SeaRenderer(FakeRenderer):
    """Tiles of even rows are the sea: one colour, the same bytes."""

    def render_tile(
        self, style: str, lang: str, tile: TileAddress, codec: Codec, scale: int = 1
    ) -> Rendered:
        if tile.y % 2 == 0:
            return Rendered(b"sea", True, True)
        return super().render_tile(style, lang, tile, codec, scale)


class FakeStore:
    """Tiles in a dict, written from another thread than the caller's; ``fail`` raises."""

    def __init__(self, fail: dict[str, Exception] | None = None) -> None:
        self.tiles: dict[str, bytes] = {}
        self.likes: dict[str, str | None] = {}
        self.fail = fail or {}
        self.threads: set[str] = set()
        self.written: dict[str, float] = {}

    def get(self, key: str) -> bytes | None:
        return self.tiles.get(key)

    def read(self, key: str) -> StoredTile | None:
        data = self.tiles.get(key)
        return None if data is None else StoredTile(data, f'"{len(data)}"')

    def put(self, key: str, data: bytes, like: str | None = None) -> str:
        self.likes[key] = like
        self.threads.add(threading.current_thread().name)
        if key in self.fail:
            raise self.fail[key]
        self.tiles[key] = data
        return f'"{len(data)}"'

    def exists(self, key: str) -> bool:
        return key in self.tiles

    def modified(self, key: str) -> float | None:
        return self.written.get(key) if key in self.tiles else None

    def drop_style(self, style: str) -> None:
        self.tiles.clear()


def run(
    renderer: FakeRenderer,
    store: FakeStore | FileTileStore,
    refresh: bool = True,
    chunk: Chunk = CHUNK,
    refresh_before: float | None = None,
    failed: list[TileAddress] | None = None,
) -> tuple[str | None, dict[str, int]]:
    runner = PretileRunner(None, renderer, None, max_tiles=100, lock_ttl_s=60)  # type: ignore[arg-type]
    job = PretileJob("job", "s", "en", refresh, False, refresh_before=refresh_before)
    counts = {"rendered": 0, "skipped": 0, "empty": 0, "cancelled": 0}
    error = runner._render_tiles(chunk, job, store, counts, failed)
    return error, counts


def key(tile: TileAddress) -> str:
    return tile_key("s", "en", tile)


def test_every_tile_is_stored_by_the_writer_thread_and_counted() -> None:
    store = FakeStore()

    error, counts = run(FakeRenderer(), store)

    assert error is None
    assert counts == {"rendered": 4, "skipped": 0, "empty": 2, "cancelled": 0}
    assert store.tiles == {key(t): f"s/en/{t.z}/{t.x}/{t.y}".encode() for t in CHUNK.tiles()}
    assert all(name.startswith("pretile-store") for name in store.threads)


def test_stored_tiles_are_skipped_unless_refreshed() -> None:
    first = TileAddress(10, 4, 6)
    store = FakeStore()
    store.tiles[key(first)] = b"old"
    renderer = FakeRenderer()

    error, counts = run(renderer, store, refresh=False)

    assert (error, counts["rendered"], counts["skipped"]) == (None, 3, 1)
    assert store.tiles[key(first)] == b"old"
    assert first not in renderer.rendered


def test_refresh_before_renders_again_only_the_tiles_written_before_it() -> None:
    old, new = TileAddress(10, 4, 6), TileAddress(10, 5, 6)
    store = FakeStore()
    store.tiles |= {key(old): b"old", key(new): b"new"}
    store.written |= {key(old): 1000.0, key(new): 3000.0}
    renderer = FakeRenderer()

    error, counts = run(renderer, store, refresh=False, refresh_before=2000.0)

    assert (error, counts["rendered"], counts["skipped"]) == (None, 3, 1)
    assert store.tiles[key(new)] == b"new"
    assert store.tiles[key(old)] == b"s/en/10/4/6"
    assert new not in renderer.rendered


def test_a_failed_chunk_lists_the_tiles_it_did_not_make() -> None:
    store = FakeStore({key(TileAddress(10, 5, 6)): OSError(errno.EIO, "I/O error")})
    failed: list[TileAddress] = []

    error, counts = run(FakeRenderer(), store, failed=failed)

    assert error is not None
    made = {TileAddress(*map(int, k.split("/")[2:4]), int(k.split("/")[4].split(".")[0]))
            for k in store.tiles}  # fmt: skip
    assert set(failed) == set(CHUNK.tiles()) - made
    assert len(failed) + counts["rendered"] == CHUNK.size


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device"),
            "zoom 10 chunk 4,6: the tile cache could not be written: No space left on device",
        ),
        (RuntimeError("a bug"), "zoom 10 chunk 4,6: internal error RuntimeError"),
        (UnavailableError("object storage is down"), "zoom 10 chunk 4,6: object storage is down"),
    ],
)
def test_a_failed_write_is_the_chunks_error_and_only_stored_tiles_count(
    failure: Exception, message: str
) -> None:
    second = TileAddress(10, 5, 6)
    store = FakeStore({key(second): failure})

    error, counts = run(FakeRenderer(), store)

    assert error == message
    assert key(second) not in store.tiles
    assert key(TileAddress(10, 4, 6)) in store.tiles
    # tiles rendered before the failure was seen are stored and counted, nothing else
    assert counts["rendered"] == len(store.tiles) >= 1
    assert counts["empty"] == sum(k.split("/")[3] == "5" for k in store.tiles)


def test_a_failed_render_stops_the_chunk_after_storing_the_tiles_before_it() -> None:
    store = FakeStore()

    error, counts = run(FakeRenderer(fail_at=TileAddress(10, 4, 7)), store)

    assert error == "zoom 10 chunk 4,6: the raster of style 's' is gone"
    assert sorted(store.tiles) == sorted(key(TileAddress(10, x, 6)) for x in (4, 5))
    assert (counts["rendered"], counts["empty"]) == (2, 1)


def test_a_write_that_ends_as_it_is_looked_at_does_not_stop_the_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A write that succeeded between two looks at it (still running, then done) once passed
    # for a failed one: the chunk stopped early, its other tiles neither made nor counted, and
    # no error (a run came out 11 tiles short). Each write here looks still running to the
    # first look, done to the next: the moment of that race, every time.
    looked: set[int] = set()
    done = Future.done

    def first_look_running(future: Future[str]) -> bool:
        if id(future) not in looked:
            looked.add(id(future))
            return False
        return done(future)

    monkeypatch.setattr(Future, "done", first_look_running)
    store = FakeStore()

    error, counts = run(FakeRenderer(), store)

    assert error is None
    assert counts["rendered"] == len(store.tiles) == CHUNK.size


# -- metatiles: the chunk drawn as blocks, cut into the tiles it makes ---------------------

BIG = Chunk(10, 8, 16, 15, 23)  # 8 x 8 tiles, one aligned block of 8, four of 4


def test_a_chunk_is_drawn_as_one_metatile_with_the_buffer_and_every_tile_is_stored() -> None:
    store, renderer = FakeStore(), FakeRenderer(size=8)

    error, counts = run(renderer, store, chunk=BIG)

    assert error is None
    assert [(b, len(t), buffer) for b, t, buffer in renderer.blocks] == [
        (Metatile(10, 8, 16, 15, 23), 64, 128)
    ]
    assert counts == {"rendered": 64, "skipped": 0, "empty": 0, "cancelled": 0}
    assert sorted(store.tiles) == sorted(key(t) for t in BIG.tiles())


def test_a_layers_smaller_metatiles_split_the_chunk_into_aligned_blocks() -> None:
    renderer = FakeRenderer(size=4)

    error, counts = run(renderer, FakeStore(), chunk=BIG)

    assert error is None
    assert [b for b, _, _ in renderer.blocks] == [
        Metatile(10, 8, 16, 11, 19),
        Metatile(10, 12, 16, 15, 19),
        Metatile(10, 8, 20, 11, 23),
        Metatile(10, 12, 20, 15, 23),
    ]
    assert counts["rendered"] == 64


def test_cached_tiles_are_skipped_and_the_metatile_holds_only_the_tiles_to_draw() -> None:
    store, renderer = FakeStore(), FakeRenderer(size=8)
    for tile in BIG.tiles():
        if (tile.x, tile.y) not in ((9, 17), (10, 19)):
            store.tiles[key(tile)] = b"old"

    error, counts = run(renderer, store, refresh=False, chunk=BIG)

    assert (error, counts["rendered"], counts["skipped"]) == (None, 2, 62)
    # the bounding box of the two tiles, cut into those two only
    assert [(b, t) for b, t, _ in renderer.blocks] == [
        (Metatile(10, 9, 17, 10, 19), [TileAddress(10, 9, 17), TileAddress(10, 10, 19)])
    ]
    assert sum(data != b"old" for data in store.tiles.values()) == 2


def test_nothing_to_draw_draws_no_metatile() -> None:
    store, renderer = FakeStore(), FakeRenderer(size=8)
    store.tiles = {key(t): b"old" for t in BIG.tiles()}

    error, counts = run(renderer, store, refresh=False, chunk=BIG)

    assert (error, counts["rendered"], counts["skipped"]) == (None, 0, 64)
    assert renderer.blocks == []


@dataclass(frozen=True)
class Covered:
    """A chunk whose ``tiles()`` yields only some of its block (a coverage's, say)."""

    z: int = 10
    x0: int = 8
    y0: int = 16
    keep: frozenset[tuple[int, int]] = frozenset({(8, 16), (9, 16), (8, 17), (15, 23)})

    @property
    def size(self) -> int:
        return len(self.keep)

    def tiles(self) -> Iterator[TileAddress]:
        for tile in BIG.tiles():
            if (tile.x, tile.y) in self.keep:
                yield tile


def test_only_the_tiles_the_chunk_yields_are_drawn_stored_and_counted() -> None:
    store, renderer = FakeStore(), FakeRenderer(size=8)

    error, counts = run(renderer, store, chunk=Covered())  # type: ignore[arg-type]

    assert error is None
    assert counts["rendered"] == 4
    assert sorted(store.tiles) == sorted(key(TileAddress(10, x, y)) for x, y in Covered.keep)
    assert [(b, len(t)) for b, t, _ in renderer.blocks] == [(Metatile(10, 8, 16, 15, 23), 4)]


def test_a_failed_metatile_stores_none_of_its_tiles_and_stops_the_chunk() -> None:
    store = FakeStore()

    error, counts = run(FakeRenderer(fail_at=TileAddress(10, 13, 17), size=4), store, chunk=BIG)

    assert error == "zoom 10 chunk 8,16: the raster of style 's' is gone"
    # the first block (columns 8-11) is stored whole, the failed one (12-15) not at all
    assert sorted(store.tiles) == sorted(key(t) for t in Metatile(10, 8, 16, 11, 19).tiles())
    assert counts["rendered"] == 16


# -- tiles of one colour: stored like the chunk's first tile of the same bytes -------------


def test_a_tile_of_one_colour_is_stored_like_the_chunks_first_of_its_bytes() -> None:
    store = FakeStore()

    error, counts = run(SeaRenderer(size=8), store, chunk=BIG)

    assert error is None
    assert counts["rendered"] == 64
    sea = [key(t) for t in BIG.tiles() if t.y % 2 == 0]
    assert store.likes == {
        key(t): None if t.y % 2 or key(t) == sea[0] else sea[0] for t in BIG.tiles()
    }
    assert all(store.tiles[k] == b"sea" for k in sea)


def test_in_a_file_cache_the_sea_is_one_file_of_many_names(tmp_path: Path) -> None:
    store = FileTileStore(tmp_path)
    (tmp_path / key(TileAddress(10, 8, 16))).parent.mkdir(parents=True)
    (tmp_path / key(TileAddress(10, 8, 16))).write_bytes(b"old")  # drawn again: replaced

    error, counts = run(SeaRenderer(size=8), store, chunk=BIG)

    assert error is None
    assert counts == {"rendered": 64, "skipped": 0, "empty": 32, "cancelled": 0}
    inodes: dict[bytes, set[int]] = {}
    for tile in BIG.tiles():
        path = tmp_path / key(tile)
        data = path.read_bytes()
        inodes.setdefault(data, set()).add(path.stat().st_ino)
    assert inodes.pop(b"sea") == {(tmp_path / key(TileAddress(10, 8, 16))).stat().st_ino}
    assert (tmp_path / key(TileAddress(10, 8, 16))).stat().st_nlink == 32
    assert len(inodes) == 32  # the other tiles: a file each
    assert all(len(i) == 1 for i in inodes.values())
    assert not list(tmp_path.rglob(".*"))  # no temporary left
