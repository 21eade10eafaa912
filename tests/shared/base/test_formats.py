"""Tile formats and variants: URL segments, cache keys, URL templates, encodings, empty tiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shared.base.encoding import (
    JPEG_BACKGROUND,
    PNG_FORMAT,
    WEBP_LOSSLESS_FORMAT,
    Encoding,
    empty_tile,
)
from shared.base.formats import (
    PNG_TILE,
    TileFormat,
    TileVariant,
    parse_variant,
    tile_url_template,
    tile_url_templates,
)
from shared.base.grid import TileAddress
from shared.errors import InvalidInputError
from shared.tiles.store import FileTileStore, key_format, tile_key
from tests.layers import decode

STYLE = "c2NlbmUudGlm"
TILE = TileAddress(3, 2, 1)
WEBP_2X = TileVariant(TileFormat.WEBP, 2)


@pytest.mark.parametrize(
    ("y", "extension", "row", "variant"),
    [
        ("1", "png", "1", PNG_TILE),
        ("1", "webp", "1", TileVariant(TileFormat.WEBP)),
        ("1", "jpg", "1", TileVariant(TileFormat.JPEG)),
        ("1", "jpeg", "1", TileVariant(TileFormat.JPEG)),
        ("1@2x", "png", "1", TileVariant(TileFormat.PNG, 2)),
        ("1@2x", "webp", "1", WEBP_2X),
        ("abc", "png", "abc", PNG_TILE),  # the row is parse_tile's to refuse
    ],
)
def test_the_last_segment_gives_the_row_and_the_variant(
    y: str, extension: str, row: str, variant: TileVariant
) -> None:
    assert parse_variant(y, extension) == (row, variant)


@pytest.mark.parametrize(
    ("y", "extension", "parameter"),
    [
        ("1", "gif", "format"),
        ("1", "PNG", "format"),
        ("1", "", "format"),
        ("1@3x", "png", "y"),
        ("1@2x@2x", "png", "y"),
        ("1@", "png", "y"),
        ("1@2X", "png", "y"),
    ],
)
def test_unknown_formats_and_scales_are_refused(y: str, extension: str, parameter: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_variant(y, extension)
    assert caught.value.detail["parameter"] == parameter


def test_each_variant_has_its_own_key_beside_the_png() -> None:
    keys = {v: tile_key(STYLE, "en", TILE, v) for v in (PNG_TILE, WEBP_2X)}
    # the PNG keys are those of every tile cached before other formats existed
    assert tile_key(STYLE, "en", TILE) == keys[PNG_TILE] == f"{STYLE}/en/3/2/1.png"
    assert keys[WEBP_2X] == f"{STYLE}/en/3/2/1@2x.webp"
    assert tile_key(STYLE, "en", TILE, TileVariant(TileFormat.JPEG)) == f"{STYLE}/en/3/2/1.jpg"
    assert key_format(keys[WEBP_2X]) is TileFormat.WEBP
    assert {f.media_type for f in TileFormat} == {"image/png", "image/webp", "image/jpeg"}


def test_dropping_a_style_drops_every_variant(tmp_path: Path) -> None:
    store = FileTileStore(tmp_path)
    variants = [TileVariant(f, scale) for f in TileFormat for scale in (1, 2)]
    for v in variants:
        store.put(tile_key(STYLE, "en", TILE, v), v.name.encode())
    store.put(tile_key("other", "en", TILE, WEBP_2X), b"kept")
    names = {p.name for p in (tmp_path / STYLE / "en" / "3" / "2").iterdir()}
    assert names == {"1.png", "1.webp", "1.jpg", "1@2x.png", "1@2x.webp", "1@2x.jpg"}

    store.drop_style(STYLE)

    assert not any(store.exists(tile_key(STYLE, "en", TILE, v)) for v in variants)
    assert store.get(tile_key("other", "en", TILE, WEBP_2X)) == b"kept"


def test_url_templates_name_every_variant() -> None:
    png = tile_url_template("/api-user", STYLE, "en")
    assert png == f"/api-user/rtile/{STYLE}/en/{{z}}/{{x}}/{{y}}.png"  # spec 2.2's url
    templates = tile_url_templates("/api-user", STYLE, "en")
    assert templates == {
        name: f"/api-user/rtile/{STYLE}/en/{{z}}/{{x}}/{{y}}{suffix}"
        for name, suffix in [
            ("png", ".png"),
            ("png@2x", "@2x.png"),
            ("webp", ".webp"),
            ("webp@2x", "@2x.webp"),
            ("jpg", ".jpg"),
            ("jpg@2x", "@2x.jpg"),
        ]
    }


def test_the_settings_choose_the_encoders_options() -> None:
    default = Encoding()
    assert default.codec(TileFormat.PNG).options == PNG_FORMAT
    assert default.codec(TileFormat.WEBP).options == "webp:method=2:quality=80"
    assert default.codec(TileFormat.JPEG).options == "jpeg85"
    tuned = Encoding(jpeg_quality=60, webp_quality=50, webp_lossless=True)
    assert tuned.codec(TileFormat.WEBP).options == WEBP_LOSSLESS_FORMAT
    assert tuned.codec(TileFormat.JPEG).options == "jpeg60"
    assert tuned.codec(TileFormat.PNG) == default.codec(TileFormat.PNG)


@pytest.mark.parametrize("size", [256, 512])
def test_empty_tiles_are_transparent_or_the_jpeg_background(size: int) -> None:
    for tile_format in TileFormat:
        pixels = decode(empty_tile(tile_format, size))
        assert pixels.shape[1:] == (size, size)
        if tile_format.has_alpha:
            assert pixels.shape[0] == 4
            assert not pixels[3].any()
        else:
            expected = np.array(JPEG_BACKGROUND)[:, None, None]
            assert (pixels == expected).all()
    assert empty_tile(TileFormat.WEBP, size).startswith(b"RIFF")
    assert empty_tile(TileFormat.JPEG, size).startswith(b"\xff\xd8")
