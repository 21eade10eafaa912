"""Metatiles: their blocks, and the tiles cut from them against the tiles drawn one by one.

The pixels are Mapnik's (real layers configured as the job does, a labelled style of the demo
countries), decoded by GDAL. With ``MAPSVC_SCREENSHOTS=<folder>`` (``make screenshots``: the
committed ``docs/images``) the labelled comparison is saved as ``metatile-difference.png``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from shared.base.encoding import PNG_CODEC, Codec, Encoding, gdal_encode
from shared.base.formats import TileFormat
from shared.base.grid import TileAddress
from shared.errors import NotFoundError, UnprocessableError
from shared.seeding.plan import chunks, plan_pretile
from shared.seeding.pretile_run import PretileJob, PretileRunner
from shared.settings import Settings
from shared.tiles.metatile import Metatile, Metatiling, metatiles
from shared.tiles.render import TileRenderer
from shared.tiles.store import FileTileStore, tile_key
from shared.tiles.styles import read_style
from tests.layers import RGB, WORLD, configure, decode
from tests.styles import write_countries

SHOTS = os.environ.get("MAPSVC_SCREENSHOTS")
#: metres of the Web Mercator world's half side
HALF = 20037508.342789244


# -- blocks -------------------------------------------------------------------------------


def test_tiles_group_into_aligned_blocks_each_the_bounding_box_of_its_tiles() -> None:
    tiles = [TileAddress(10, x, y) for x, y in ((9, 17), (3, 2), (12, 19), (7, 7), (8, 16))]

    groups = metatiles(tiles, 8)

    assert groups == [
        (Metatile(10, 8, 16, 12, 19), [tiles[0], tiles[2], tiles[4]]),
        (Metatile(10, 3, 2, 7, 7), [tiles[1], tiles[3]]),
    ]
    assert list(Metatile(10, 3, 2, 4, 3).tiles()) == [
        TileAddress(10, x, y) for y in (2, 3) for x in (3, 4)
    ]


def test_a_block_inside_the_world_has_its_buffer_on_every_side() -> None:
    block = Metatile(5, 8, 8, 15, 15)

    area, cut = block.area(256, 1, 128)

    side = 2 * HALF / 32 / 256  # metres of a pixel at zoom 5
    west, north = -HALF + 8 * 32 * 8 * side, HALF - 8 * 32 * 8 * side
    assert (area.width, area.height, area.scale) == (2304, 2304, 1)
    assert area.bbox == pytest.approx(
        (west - 128 * side, north - 2176 * side, west + 2176 * side, north + 128 * side)
    )
    assert block.offset(TileAddress(5, 8, 8), cut) == (128, 128)
    assert block.offset(TileAddress(5, 10, 9), cut) == (128 + 512, 128 + 256)
    retina, cut2 = block.area(256, 2, 128)
    assert (retina.width, retina.bbox, retina.scale) == (4608, area.bbox, 2)
    assert block.offset(TileAddress(5, 10, 9), cut2) == (256 + 1024, 256 + 512)


def test_the_buffer_stops_at_the_worlds_edge() -> None:
    whole, cut = Metatile(2, 0, 0, 3, 3).area(256, 1, 128)
    assert (whole.width, whole.height) == (1024, 1024)
    assert whole.bbox == pytest.approx((-HALF, -HALF, HALF, HALF))
    assert (cut.left, cut.top) == (0, 0)
    # the north-west corner block of zoom 4: no buffer west and north, all of it east and south
    corner, cut = Metatile(4, 0, 0, 7, 7).area(256, 1, 128)
    assert (corner.width, corner.height, cut.left, cut.top) == (2176, 2176, 0, 0)
    assert (corner.bbox[0], corner.bbox[3]) == pytest.approx((-HALF, HALF))
    # a buffer wider than the one tile left to the edge stops there
    east, cut = Metatile(1, 0, 0, 0, 1).area(256, 1, 300)
    assert (east.width, east.height, cut.left) == (512, 512, 0)
    assert east.bbox == pytest.approx((-HALF, -HALF, HALF, HALF))


def test_the_settings_name_the_metatiling(settings: Settings) -> None:
    assert Metatiling.from_settings(settings.tiles) == Metatiling(8, 128)
    changed = settings.tiles.model_copy(update={"metatile_size": 1, "metatile_buffer": 0})
    assert Metatiling.from_settings(changed) == Metatiling(1, 0)


# -- rasters: the same pixels -------------------------------------------------------------


@pytest.fixture(scope="module")
def world_3857(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> str:
    """The world raster warped by ``gdalwarp`` onto the grid's pixels at zoom 2 (1024 px a side
    over the Web Mercator square): Mapnik reads it without reprojecting. Its id."""
    target = raster_dir / "metatile" / "world3857.tif"
    target.parent.mkdir(exist_ok=True)
    subprocess.run(
        ["gdalwarp", "-q", "-overwrite", "-t_srs", "EPSG:3857", "-ts", "1024", "1024"]
        + ["-te", str(-HALF), str(-HALF), str(HALF), str(HALF), "-dstnodata", "0"]
        + [str(raster_dir / WORLD), str(target)],
        check=True,
    )
    return configure(settings, rdb, "metatile/world3857.tif")


@pytest.fixture(scope="module")
def renderer(settings: Settings) -> Iterator[TileRenderer]:
    with TileRenderer(settings.dirs.mapnik) as renderer:
        yield renderer


def both_ways(
    renderer: TileRenderer,
    style: str,
    block: Metatile,
    codec: Codec = PNG_CODEC,
    scale: int = 1,
    buffer: int = 128,
) -> Iterator[tuple[TileAddress, tuple[bytes, bool], tuple[bytes, bool]]]:
    """Each tile of ``block``: cut from the metatile, and drawn alone (bytes, empty)."""
    cut = dict(
        renderer.render_metatile(style, "en", block, list(block.tiles()), codec, scale, buffer)
    )
    assert list(cut) == list(block.tiles())
    for tile in block.tiles():
        alone = renderer.render_tile(style, "en", tile, codec, scale)
        yield tile, (cut[tile].data, cut[tile].empty), (alone.data, alone.empty)


@pytest.mark.parametrize(
    "block",
    [
        Metatile(1, 0, 0, 1, 1),  # the whole world, read at half the raster's pixels
        Metatile(2, 0, 0, 1, 1),  # the north-west quarter, read at the raster's pixels
        Metatile(4, 0, 0, 7, 7),  # the north-west corner: a buffer east and south only
        Metatile(5, 8, 8, 15, 15),  # inside: the buffer all around
        Metatile(5, 16, 10, 18, 11),  # a partial block (3 x 2)
    ],
)
@pytest.mark.parametrize(
    ("codec", "scale"),
    [
        (PNG_CODEC, 1),
        (PNG_CODEC, 2),
        (Encoding(webp_lossless=True).codec(TileFormat.WEBP), 1),
        (Encoding().codec(TileFormat.JPEG), 2),
    ],
    ids=["png", "png@2x", "webp-lossless", "jpg@2x"],
)
def test_a_tile_cut_from_a_metatile_is_the_tile_drawn_alone_on_the_grids_pixels(
    renderer: TileRenderer, world_3857: str, block: Metatile, codec: Codec, scale: int
) -> None:
    drawn = 0
    for tile, (cut, cut_empty), (alone, alone_empty) in both_ways(
        renderer, world_3857, block, codec, scale
    ):
        assert cut_empty is alone_empty, tile
        pixels, expected = decode(cut), decode(alone)
        assert pixels.shape == expected.shape == (pixels.shape[0], 256 * scale, 256 * scale)
        assert np.array_equal(pixels, expected), tile
        drawn += not cut_empty
    assert drawn == len(list(block.tiles()))  # the world raster has land or sea everywhere


def test_a_style_of_rasters_alone_is_seeded_tile_by_tile_unless_its_parameter_says(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, renderer: TileRenderer
) -> None:
    # metatiles would gain a raster nothing, and Mapnik's resampling of a reprojected raster
    # differs between a tile drawn alone and the same tile cut from a bigger render
    for layer in (RGB, WORLD):
        assert renderer.metatile_size(configure(settings, rdb, layer), "en", 8) == 1
    xml = (settings.dirs.mapnik / f"{configure(settings, rdb, RGB)}.xml").read_text()
    forced = settings.dirs.mapnik / "metatile-forced.xml"  # beside it: its paths are relative
    forced.write_text(
        xml.replace("<Parameters>", '<Parameters><Parameter name="metatile">4</Parameter>')
    )
    try:
        assert renderer.metatile_size("metatile-forced", "en", 8) == 4
    finally:
        forced.unlink()


# -- a labelled style: the same pixels but where labels are ------------------------------

#: Europe, North Africa and Asia at zoom 4: a block of 8 x 4 tiles
LABELLED_BLOCK = Metatile(4, 8, 4, 15, 7)


@pytest.fixture(scope="module")
def countries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TileRenderer]:
    """Styles ``plain`` (the countries filled) and ``labelled`` (and named), in a folder."""
    folder = tmp_path_factory.mktemp("metatile-styles")
    write_countries(folder)
    with TileRenderer(folder) as renderer:
        yield renderer


def mosaic(images: dict[TileAddress, bytes], block: Metatile) -> np.ndarray:
    """The decoded tiles of ``block`` side by side (bands, rows, columns)."""
    rows = []
    for y in range(block.y0, block.y1 + 1):
        row = [decode(images[TileAddress(block.z, x, y)]) for x in range(block.x0, block.x1 + 1)]
        rows.append(np.concatenate(row, axis=2))
    return np.concatenate(rows, axis=1)


def both_mosaics(renderer: TileRenderer, style: str) -> tuple[np.ndarray, np.ndarray]:
    """The block's tiles cut from the metatile, and drawn one by one, each as one mosaic."""
    cut, alone = {}, {}
    for tile, (data, _), (single, _) in both_ways(renderer, style, LABELLED_BLOCK):
        cut[tile], alone[tile] = data, single
    return mosaic(cut, LABELLED_BLOCK), mosaic(alone, LABELLED_BLOCK)


def near_borders(differs: np.ndarray, pixels: int) -> bool:
    """Whether every ``True`` of ``differs`` (rows, columns of a mosaic) lies within ``pixels``
    of a tile's border."""
    rows, columns = np.nonzero(differs)
    edge = np.minimum(
        np.minimum(rows % 256, 255 - rows % 256), np.minimum(columns % 256, 255 - columns % 256)
    )
    return bool((edge < pixels).all())


def test_without_labels_the_metatile_draws_the_same_pixels(countries: TileRenderer) -> None:
    # but for Mapnik's anti-aliasing: a vertex a tile's origin away from the metatile's lands
    # a rounding apart (1 level in a pixel's coverage), and an outline clipped at a tile's
    # border in the tile drawn alone is not clipped there in the metatile
    cut, alone = both_mosaics(countries, "plain")

    assert (cut[3] == 255).mean() > 0.3  # land, drawn
    differs = (cut != alone).any(axis=0)
    assert differs.mean() < 0.001
    assert near_borders(np.abs(cut.astype(int) - alone).max(axis=0) > 2, 24)


def test_labels_differ_only_where_labels_are_and_are_whole_across_tile_borders(
    countries: TileRenderer,
) -> None:
    plain_cut, plain_alone = both_mosaics(countries, "plain")
    cut, alone = both_mosaics(countries, "labelled")

    differs = (cut != alone).any(axis=0)
    # where labels are drawn, in either way (and the pixel around their glyphs' edges)
    labels = (cut != plain_cut).any(axis=0) | (alone != plain_alone).any(axis=0)
    near = labels.copy()
    for axis in (0, 1):
        near |= np.roll(labels, 1, axis) | np.roll(labels, -1, axis)
    assert differs.sum() > 1000
    # elsewhere they differ as the countries alone do
    plain_differs = (plain_cut != plain_alone).any(axis=0)
    assert not (differs & ~near & ~plain_differs).any()
    # tiles drawn alone cut labels at their borders: text pixels stop at a border there
    # (a label ends on one side), where the metatile's labels run across it
    borders = [x * 256 for x in range(1, LABELLED_BLOCK.x1 - LABELLED_BLOCK.x0 + 1)]
    cut_text = (cut != plain_cut).any(axis=0)
    alone_text = (alone != plain_alone).any(axis=0)
    crossing_cut = sum(int((cut_text[:, b - 1] & cut_text[:, b]).sum()) for b in borders)
    crossing_alone = sum(int((alone_text[:, b - 1] & alone_text[:, b]).sum()) for b in borders)
    assert crossing_cut > crossing_alone
    if SHOTS:
        save_difference(Path(SHOTS) / "metatile-difference.png", alone, cut, differs)


def save_difference(path: Path, alone: np.ndarray, cut: np.ndarray, differs: np.ndarray) -> None:
    """Three panels of the tiles around the Mediterranean, one above the other: drawn one by
    one (tile borders grey), cut from the metatile, and the pixels that differ (red) over the
    metatile's faded."""
    window = (slice(256, 768), slice(0, 768))  # rows of zoom 4's y 5-6, columns of x 8-10

    def panel(pixels: np.ndarray) -> np.ndarray:
        rgb: np.ndarray = pixels[:3] * (pixels[3] / 255) + 255 * (1 - pixels[3] / 255)
        return rgb[:, window[0], window[1]]

    def bordered(rgb: np.ndarray) -> np.ndarray:
        out = rgb.copy()
        out[:, ::256, :] = out[:, :, ::256] = 150
        return out

    faded = 255 - (255 - panel(cut)) * 0.35
    faded[:, differs[window]] = np.array([220, 20, 20])[:, None]
    gap = np.full((3, 8, faded.shape[2]), 255.0)
    image = np.concatenate([bordered(panel(alone)), gap, bordered(panel(cut)), gap, faded], 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gdal_encode("PNG", np.round(image).astype(np.uint8), ZLEVEL=9))


@pytest.mark.parametrize(
    "codec",
    [PNG_CODEC, Encoding().codec(TileFormat.WEBP), Encoding().codec(TileFormat.JPEG)],
    ids=["png", "webp", "jpg"],
)
def test_a_seeded_tile_has_the_bytes_of_the_tile_drawn_alone_wherever_their_pixels_agree(
    countries: TileRenderer, codec: Codec
) -> None:
    # the encoding is the same code both ways (a tile of one colour encoded once and reused,
    # PNG written by numpy and zlib-ng): the same pixels give the same bytes, so a client that
    # had a tile on demand and gets it seeded sees no change where the pixels are the same
    same = 0
    for block in (LABELLED_BLOCK, Metatile(5, 0, 24, 7, 31)):  # Europe; the sea, Antarctica
        for tile, (cut, cut_empty), (alone, alone_empty) in both_ways(
            countries, "labelled", block, codec
        ):
            if np.array_equal(decode(cut), decode(alone)):
                assert (cut, cut_empty) == (alone, alone_empty), tile
                same += 1
    assert same >= 40  # the open sea, Antarctica's inside, countries away from labels


def test_the_metatile_of_a_missing_style_raises_before_drawing(countries: TileRenderer) -> None:
    with pytest.raises(NotFoundError):
        next(countries.render_metatile("nope", "en", LABELLED_BLOCK, [TileAddress(4, 8, 4)]))


def test_a_layers_metatile_parameter_sets_its_side(tmp_path: Path) -> None:
    for name, value in (("two", "2"), ("zero", "0"), ("word", "big")):
        (tmp_path / f"{name}.xml").write_text(
            f'<Map srs="epsg:3857"><Parameters><Parameter name="metatile">{value}</Parameter>'
            "</Parameters></Map>"
        )
    (tmp_path / "plain.xml").write_text('<Map srs="epsg:3857"/>')
    with TileRenderer(tmp_path) as renderer:
        assert renderer.metatile_size("two", "en", 8) == 2
        assert renderer.metatile_size("plain", "en", 8) == 1  # draws nothing past a tile
        for bad in ("zero", "word"):
            with pytest.raises(UnprocessableError, match="'metatile' parameter"):
                renderer.metatile_size(bad, "en", 8)


# -- a pre-tiling run drawn by metatiles --------------------------------------------------


def seed(
    renderer: TileRenderer, store: FileTileStore, style: str, zooms: tuple[int, int], refresh: bool
) -> tuple[set[TileAddress], dict[str, int]]:
    """Every chunk of the plan of ``style``'s footprint rendered by the runner (metatiles of
    the settings' defaults): the tiles planned, and what the chunks counted."""
    bounds = read_style(renderer.mapnik_dir, style).footprint
    plan = plan_pretile(bounds, *zooms)
    runner = PretileRunner(None, renderer, None, max_tiles=10**6, lock_ttl_s=60)  # type: ignore[arg-type]
    job = PretileJob("job", style, "en", refresh, False)
    counts = {"rendered": 0, "skipped": 0, "empty": 0, "cancelled": 0}
    planned = set()
    for chunk in chunks(bounds, plan):
        planned |= set(chunk.tiles())
        assert runner._render_tiles(chunk, job, store, counts) is None
    assert len(planned) == plan["total"]
    return planned, counts


def stored(store: FileTileStore, style: str) -> set[TileAddress]:
    root = store.root / style / "en"
    return {
        TileAddress(*(int(p) for p in path.relative_to(root).with_suffix("").parts))
        for path in root.rglob("*.png")
    }


def test_a_run_by_metatiles_stores_the_plan_skips_what_is_cached_and_refreshes(
    countries: TileRenderer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks: list[Metatile] = []
    draw = countries.render_metatile

    def spy(style: str, lang: str, block: Metatile, *args: Any) -> Iterator[Any]:
        blocks.append(block)
        return draw(style, lang, block, *args)

    monkeypatch.setattr(countries, "render_metatile", spy)
    store = FileTileStore(tmp_path)
    assert countries.metatile_size("labelled", "en", 8) == 8

    planned, counts = seed(countries, store, "labelled", (0, 5), refresh=False)

    assert len(planned) == 1 + 4 + 16 + 64 + 256
    assert (counts["rendered"], counts["skipped"]) == (341, 0)
    assert 0 < counts["empty"] < 341  # the open sea
    assert stored(store, "labelled") == planned
    assert len(blocks) == 1 + 1 + 1 + 1 + 4  # a block per chunk: zooms 0-3 whole, 4 of zoom 4
    gone = sorted(planned, key=lambda t: (t.z, t.x, t.y))[::40]
    for tile in gone:
        (tmp_path / tile_key("labelled", "en", tile)).unlink()
    kept = tmp_path / tile_key("labelled", "en", TileAddress(4, 9, 5))
    kept.write_bytes(b"stale")

    _, again = seed(countries, store, "labelled", (0, 5), refresh=False)

    assert (again["rendered"], again["skipped"]) == (len(gone), 341 - len(gone))
    assert stored(store, "labelled") == planned
    assert kept.read_bytes() == b"stale"

    _, fresh = seed(countries, store, "labelled", (0, 5), refresh=True)

    assert (fresh["rendered"], fresh["skipped"], fresh["empty"]) == (341, 0, counts["empty"])
    assert kept.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(("layer", "zooms"), [(RGB, (8, 11)), (WORLD, (0, 4))])
def test_a_raster_layer_is_seeded_with_the_tiles_drawn_alone(
    settings: Settings,
    rdb: redis.Redis,
    raster_dir: Path,
    renderer: TileRenderer,
    tmp_path: Path,
    layer: str,
    zooms: tuple[int, int],
) -> None:
    style = configure(settings, rdb, layer)
    store = FileTileStore(tmp_path)

    planned, counts = seed(renderer, store, style, zooms, refresh=False)

    assert counts["rendered"] == len(planned) == {RGB: 82, WORLD: 85}[layer]
    assert stored(store, style) == planned
    for tile in planned:
        data = store.get(tile_key(style, "en", tile))
        assert data == renderer.render_tile(style, "en", tile).data, tile
