"""A pre-tiling chunk's tiles: rendered, stored by the writer thread, counted once stored."""

from __future__ import annotations

import errno
import threading
from concurrent.futures import Future

import pytest

from shared.errors import UnavailableError, UnprocessableError
from shared.tiles.encoding import Codec
from shared.tiles.grid import TileAddress
from shared.tiles.png import Rendered
from shared.tiles.pretile import Chunk
from shared.tiles.pretile_run import PretileJob, PretileRunner
from shared.tiles.store import tile_key

CHUNK = Chunk(10, 4, 6, 5, 7)  # 2 x 2 tiles


class FakeRenderer:
    """Renders a tile as its address; tiles of column 5 are empty; ``fail_at`` raises."""

    def __init__(self, fail_at: TileAddress | None = None) -> None:
        self.fail_at = fail_at
        self.rendered: list[TileAddress] = []

    def render_tile(
        self, style: str, lang: str, tile: TileAddress, codec: Codec, scale: int = 1
    ) -> Rendered:
        if tile == self.fail_at:
            raise UnprocessableError("the raster of style 's' is gone")
        self.rendered.append(tile)
        return Rendered(f"{style}/{lang}/{tile.z}/{tile.x}/{tile.y}".encode(), tile.x == 5)


class FakeStore:
    """Tiles in a dict, written from another thread than the caller's; ``fail`` raises."""

    def __init__(self, fail: dict[str, Exception] | None = None) -> None:
        self.tiles: dict[str, bytes] = {}
        self.fail = fail or {}
        self.threads: set[str] = set()

    def get(self, key: str) -> bytes | None:
        return self.tiles.get(key)

    def put(self, key: str, data: bytes) -> str:
        self.threads.add(threading.current_thread().name)
        if key in self.fail:
            raise self.fail[key]
        self.tiles[key] = data
        return f'"{len(data)}"'

    def exists(self, key: str) -> bool:
        return key in self.tiles

    def drop_style(self, style: str) -> None:
        self.tiles.clear()


def run(
    renderer: FakeRenderer, store: FakeStore, refresh: bool = True
) -> tuple[str | None, dict[str, int]]:
    runner = PretileRunner(None, renderer, None, max_tiles=100, lock_ttl_s=60)  # type: ignore[arg-type]
    job = PretileJob("job", "s", "en", refresh, False)
    counts = {"rendered": 0, "skipped": 0, "empty": 0, "cancelled": 0}
    error = runner._render_tiles(CHUNK, job, store, counts)
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
