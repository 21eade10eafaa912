"""Parameters given as text: languages, CRS codes and bounding boxes, one rule each."""

from __future__ import annotations

import pytest

from shared.errors import InvalidInputError
from shared.params import crs_valid_area, parse_bbox, parse_lang, parse_srs, parse_time_or_age

HALF = 20037508.342789244


def test_a_language_must_be_a_tag_the_service_serves() -> None:
    allowed = frozenset({"en", "uk", "pt-BR"})
    assert parse_lang("pt-BR", allowed) == "pt-BR"
    with pytest.raises(InvalidInputError, match="a language tag such as en") as caught:
        parse_lang("xx_yy", allowed, parameter="label_lang")
    assert caught.value.detail["parameter"] == "label_lang"
    with pytest.raises(InvalidInputError, match="lang must be one of en,pt-BR,uk"):
        parse_lang("de", allowed)


@pytest.mark.parametrize(
    ("text", "srs"),
    [("EPSG:3857", "EPSG:3857"), ("epsg:4326", "EPSG:4326"), ("EPSG:003857", "EPSG:3857")]
    + [("esri:102100", "ESRI:102100")],
)
def test_a_crs_code_gets_one_spelling(text: str, srs: str) -> None:
    assert parse_srs(text) == srs


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("+proj=longlat +datum=WGS84", "an authority code such as EPSG:3857"),
        ("EPSG:", "an authority code"),
        ("IGNF:LAMB93", "an authority code"),
        ("EPSG:99999", "unknown srs 'EPSG:99999'"),
    ],
)
def test_what_is_not_a_known_crs_code_is_refused(text: str, words: str) -> None:
    with pytest.raises(InvalidInputError, match=words):
        parse_srs(text)


def test_valid_areas_are_the_globe_or_the_area_of_use_with_a_margin() -> None:
    assert crs_valid_area("EPSG:4326") == (-180.0, -90.0, 180.0, 90.0)
    x0, y0, x1, y1 = crs_valid_area("EPSG:3857")
    assert x0 < -HALF  # the world, plus a tenth of it on each side
    assert x1 > HALF
    assert (x1 - x0) == pytest.approx(1.2 * 2 * HALF, rel=1e-6)


def test_a_bbox_is_four_ordered_numbers_inside_the_crs() -> None:
    assert parse_bbox("-10,-5.5,20,30") == (-10.0, -5.5, 20.0, 30.0)
    assert parse_bbox(f"{-HALF},0,{HALF},1e6", srs="EPSG:3857") == (-HALF, 0.0, HALF, 1e6)
    for text, words in [
        ("1,2,3", "bbox must be minx,miny,maxx,maxy"),
        ("a,b,c,d", "bbox must be minx,miny,maxx,maxy"),
        ("0,0,nan,1", "four finite numbers with min < max"),
        ("5,0,1,1", "four finite numbers with min < max"),
        ("0,0,200,10", "outside the valid area of EPSG:4326"),
    ]:
        with pytest.raises(InvalidInputError, match=words) as caught:
            parse_bbox(text)
        assert caught.value.detail["parameter"] == "bbox"
    # metres read as degrees are far outside
    with pytest.raises(InvalidInputError, match="outside the valid area") as caught:
        parse_bbox(f"{-HALF},0,{HALF},1e6")
    assert caught.value.detail["valid"] == [-180.0, -90.0, 180.0, 90.0]


NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("7d", NOW - 7 * 86400),
        ("12h", NOW - 12 * 3600),
        ("30m", NOW - 1800),
        ("45s", NOW - 45),
        ("2w", NOW - 14 * 86400),
        ("2026-11-01T06:00:00Z", 1793512800.0),
        ("2026-11-01T06:00:00", 1793512800.0),  # UTC when it names no offset
        ("2026-11-01T08:00:00+02:00", 1793512800.0),
        ("2026-11-01", 1793491200.0),
    ],
)
def test_a_time_or_an_age_is_a_moment(text: str, seconds: float) -> None:
    assert parse_time_or_age(text, NOW) == seconds


@pytest.mark.parametrize("text", ["7", "d7", "7 days", "-1d", "2026-13-01", "soon", "2099-01-01"])
def test_a_bad_time_or_age_is_refused_naming_the_parameter(text: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_time_or_age(text, NOW)
    assert caught.value.detail["parameter"] == "refresh_before"
