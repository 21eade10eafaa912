"""The sets of tiles truncation and expiry remove, expiry lists read, the front's kept files and
the vector cache's books: checked against brute force."""

from __future__ import annotations

import hashlib
import itertools
import struct
from pathlib import Path

import numpy as np
import pytest
import redis

from shared.base.grid import TileAddress
from shared.cache import ByteBudget
from shared.errors import InvalidInputError, PayloadTooLargeError
from shared.seeding.coverage import Coverage
from shared.seeding.expiry import MAX_LINES, expiry_tiles, parse_tile_lines
from shared.seeding.tile_sets import CoverageTiles, ListedTiles, tile_set_from_json
from shared.settings import Settings
from shared.vector import front_cache
from shared.vector.front_cache import drop_front_tiles

LISTED = [TileAddress(3, 2, 1), TileAddress(4, 4, 2), TileAddress(4, 10, 10), TileAddress(2, 1, 0)]


def brute(listed: list[TileAddress], z: int) -> set[tuple[int, int]]:
    """Every tile of zoom ``z`` that is listed, a parent of one, or a child of one."""
    found = set()
    for t in listed:
        if t.z >= z:
            found.add((t.x >> (t.z - z), t.y >> (t.z - z)))
        else:
            d = z - t.z
            found |= {
                (x, y)
                for x in range(t.x << d, (t.x + 1) << d)
                for y in range(t.y << d, (t.y + 1) << d)
            }
    return found


@pytest.mark.parametrize("z", range(0, 8))
def test_a_listed_set_is_its_tiles_parents_and_children(z: int) -> None:
    tiles = ListedTiles(LISTED)
    assert len(tiles) == 2  # 3/2/1 and 4/4/2 lie under 2/1/0
    expected = brute(LISTED, z)
    assert tiles.count(z) == len(expected)
    side = 1 << z
    xs, ys = np.meshgrid(np.arange(side), np.arange(side))
    hit = tiles.meets(z, xs.ravel(), ys.ravel())
    assert set(zip(xs.ravel()[hit].tolist(), ys.ravel()[hit].tolist(), strict=True)) == expected
    columns = tiles.columns(z)
    assert all(any(a <= x <= b for a, b in columns) for x, _ in expected)
    assert all(b1 + 1 < a2 for (_, b1), (a2, _) in itertools.pairwise(columns))  # merged
    again = tile_set_from_json(tiles.to_json())
    assert again.count(z) == tiles.count(z)


def test_a_coverage_s_columns_hold_its_tiles() -> None:
    for buffer in (0, 200):
        coverage = Coverage.of_geojson(
            {"type": "Polygon", "coordinates": [[[-10, 40], [5, 40], [-10, 52], [-10, 40]]]},
            buffer,
        )
        tiles = CoverageTiles(coverage)
        for z in range(0, 9):
            [(x0, x1)] = tiles.columns(z)
            assert {t.x for t in coverage.tiles(z)} <= set(range(x0, x1 + 1))
            assert tiles.count(z) == coverage.count(z)
    everything = CoverageTiles(None)
    assert (everything.count(3), everything.columns(3)) == (64, [(0, 7)])
    assert everything.meets(3, np.arange(4), np.arange(4)).all()


def test_an_expire_file_is_read_line_by_line() -> None:
    tiles = parse_tile_lines(" 3/2/1 \r\n\n4/10/10\n2/1/0\n")
    assert sorted(tiles.names()) == ["2/1/0", "4/10/10"]
    for text, line in (("1/0/0\n1/2/0", 2), ("x", 1), ("1/0/0\n\n\n25/0/0", 4), ("3/1/1/1", 1)):
        with pytest.raises(InvalidInputError) as caught:
            parse_tile_lines(text)
        assert caught.value.detail == {"parameter": "body", "line": line}
    with pytest.raises(InvalidInputError, match="no tile"):
        parse_tile_lines("\n \n")
    with pytest.raises(PayloadTooLargeError):
        parse_tile_lines("0/0/0\n" * (MAX_LINES + 1))
    assert expiry_tiles(b'["1/1/1"]', "application/json").count(2) == 4
    polygon = b'{"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 0]]]}'
    assert expiry_tiles(polygon, "application/geo+json").count(0) == 1


def kept(folder: Path, uri: str, version: int = 5) -> Path:
    """A file as nginx keeps an answer under ``proxy_cache_key "$uri|…"`` (levels 1:2)."""
    key = f"{uri}|1"
    name = hashlib.md5(key.encode()).hexdigest()
    path = folder / name[-1] / name[-3:-1] / name
    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack("=Qq", version, 2_000_000_000) + bytes(300)
    path.write_bytes(header + f"\nKEY: {key}\n".encode() + b"HTTP/1.1 200 OK\r\n\r\nbody")
    return path


PATTERNS = [
    r"^/(?:api\-user|api/v1)/vtile/(?P<vlayer>[a-z.]+)/(?P<z>\d+)/(?P<x>\d+)/(?P<y>\d+)\.pbf$"
]


def test_the_front_s_kept_answers_of_a_layer_s_tiles_are_marked_expired(tmp_path: Path) -> None:
    folder = tmp_path / "vtiles"
    gone = kept(folder, "/api-user/vtile/public.a/2/1/1.pbf")
    other = kept(folder, "/api/v1/vtile/public.b/2/1/1.pbf")  # another layer
    outside = kept(folder, "/api/v1/vtile/public.a/2/3/3.pbf")
    foreign = kept(folder, "/api/v1/vtile/public.a/2/1/1.pbf?x", version=4)  # another layout
    old = kept(folder, "/api/v1/vtile/public.a/3/2/2.pbf", version=4)
    (folder / "0" / "00").mkdir(parents=True, exist_ok=True)
    (folder / "0" / "00" / "0123.0000000001").write_bytes(b"nginx's temporary file")
    dropped = drop_front_tiles(folder, PATTERNS, "public.a", lambda t: (t.x, t.y) != (3, 3))
    assert set(dropped or []) == {TileAddress(2, 1, 1), TileAddress(3, 2, 2)}
    assert struct.unpack("=q", gone.read_bytes()[8:16]) == (0,)  # expired, kept for nginx
    for untouched in (other, outside):
        assert struct.unpack("=q", untouched.read_bytes()[8:16]) == (2_000_000_000,)
    assert foreign.exists()  # its path is no tile (a query in $uri never is)
    assert not old.exists()  # an unknown header layout: removed
    assert drop_front_tiles(tmp_path / "none", PATTERNS, "public.a", lambda t: True) == []


def test_a_follower_reads_each_kept_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``known`` (the follower's), a file is read once: its path always keeps the same
    request's answer; a new file is read, a file gone is forgotten."""
    folder = tmp_path / "vtiles"
    known: front_cache.Known = {}
    first = kept(folder, "/api-user/vtile/public.a/2/1/1.pbf")
    kept(folder, "/api-user/vtile/public.b/2/1/1.pbf")
    read: list[Path] = []
    head = front_cache._head

    def reading(path: Path) -> bytes:
        read.append(path)
        return head(path)

    monkeypatch.setattr(front_cache, "_head", reading)
    assert drop_front_tiles(folder, PATTERNS, "public.a", lambda t: True, known=known) == [
        TileAddress(2, 1, 1)
    ]
    assert len(read) == 2
    read.clear()
    later = kept(folder, "/api-user/vtile/public.a/3/2/2.pbf")
    first.unlink()
    dropped = drop_front_tiles(folder, PATTERNS, "public.a", lambda t: True, known=known)
    assert dropped == [TileAddress(3, 2, 2)]
    assert read == [later]  # only the new file was read
    assert first not in known  # the gone one forgotten
    assert struct.unpack("=q", later.read_bytes()[8:16]) == (0,)


def test_dropping_entries_takes_them_off_the_books(settings: Settings, rdb: redis.Redis) -> None:
    budget = ByteBudget("tile-sets-test", 10_000)
    for i in range(3):
        budget.put(rdb, f"mapsvc:test:tile-sets:{i}", "x" * 100, 60)
    before = budget.used_bytes(rdb)
    assert budget.drop(rdb, ["mapsvc:test:tile-sets:0", "mapsvc:test:tile-sets:9"]) == 1
    assert not rdb.exists("mapsvc:test:tile-sets:0")
    assert budget.used_bytes(rdb) == before * 2 // 3
    assert rdb.zcard(budget.books[0]) == 2
    budget.drop(rdb, ["mapsvc:test:tile-sets:1", "mapsvc:test:tile-sets:2"])
    assert budget.used_bytes(rdb) == 0
