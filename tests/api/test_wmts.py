"""WMTS 1.0.0 (issue 24, section 3): capabilities read as XML against the layers, tiles equal
to ``rtile``'s, KVP names in any case, errors as ``ows:ExceptionReport``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree as ET

import numpy as np
import pytest
import redis
from starlette.testclient import TestClient

from shared.base.grid import MAX_ZOOM
from shared.settings import Settings
from tests.checks import AUTH
from tests.layers import RGB_ID, WORLD_ID, decode, tile_url
from tests.ows import ows_app

NS = {"w": "http://www.opengis.net/wmts/1.0", "ows": "http://www.opengis.net/ows/1.1"}
TILE = {"z": 8, "x": 72, "y": 110}


@pytest.fixture(scope="module")
def app(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> Iterator[TestClient]:
    with ows_app(settings, rdb) as client:
        yield client


def layers_of(xml: bytes) -> dict[str, ET.Element]:
    root = ET.fromstring(xml)
    assert root.tag == "{http://www.opengis.net/wmts/1.0}Capabilities"
    found = root.findall("w:Contents/w:Layer", NS)
    return {layer.findtext("ows:Identifier", namespaces=NS) or "": layer for layer in found}


def exception_of(r: object) -> tuple[str, str | None]:
    """The code and locator of an ``ows:ExceptionReport``."""
    root = ET.fromstring(r.content)  # type: ignore[attr-defined]
    assert root.tag == "{http://www.opengis.net/ows/1.1}ExceptionReport"
    (exception,) = root.findall("ows:Exception", NS)
    assert exception.findtext("ows:ExceptionText", namespaces=NS)
    return exception.get("exceptionCode", ""), exception.get("locator")


@pytest.mark.parametrize("mount", ["/api-user", "/api/v1"])
def test_capabilities_list_the_layers_with_keyed_urls(app: TestClient, mount: str) -> None:
    key = AUTH["Authorization"].split()[1]
    for url in (
        f"{mount}/wmts?service=WMTS&request=GetCapabilities",
        f"{mount}/wmts/1.0.0/WMTSCapabilities.xml",
    ):
        r = app.get(f"{url}&api_key={key}" if "?" in url else f"{url}?api_key={key}")
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/xml")
        layers = layers_of(r.content)
        assert {RGB_ID, WORLD_ID} <= set(layers)
        layer = layers[RGB_ID]
        lower = layer.findtext("ows:WGS84BoundingBox/ows:LowerCorner", namespaces=NS) or ""
        tj = app.get(f"{mount}/rtile/{RGB_ID}/tilejson.json", headers=AUTH).json()
        w, s = (float(v) for v in lower.split())
        assert (w, s) == pytest.approx(tj["bounds"][:2], abs=1e-9)
        formats = [f.text for f in layer.findall("w:Format", NS)]
        assert formats == ["image/png", "image/webp", "image/jpeg"]
        assert layer.findtext("w:Style/ows:Identifier", namespaces=NS) == "default"
        templates = {
            u.get("format"): u.get("template") or "" for u in layer.findall("w:ResourceURL", NS)
        }
        assert templates["image/png"] == (
            f"http://testserver{mount}/wmts/1.0.0/{RGB_ID}/{{Style}}/{{TileMatrixSet}}/"
            f"{{TileMatrix}}/{{TileRow}}/{{TileCol}}.png?api_key={key}"
        )
        root = ET.fromstring(r.content)
        hrefs = [
            e.get("{http://www.w3.org/1999/xlink}href") or ""
            for e in root.iter()
            if e.get("{http://www.w3.org/1999/xlink}href")
        ]
        assert hrefs
        assert all(parse_qs(urlsplit(h).query)["api_key"] == [key] for h in hrefs)
        matrices = root.findall("w:Contents/w:TileMatrixSet/w:TileMatrix", NS)
        assert len(matrices) == MAX_ZOOM + 1
        assert float(
            matrices[0].findtext("w:ScaleDenominator", namespaces=NS) or 0
        ) == pytest.approx(559082264.0287178)


def test_a_header_credential_is_put_in_no_url(app: TestClient) -> None:
    r = app.get("/api-user/wmts", params={"REQUEST": "GetCapabilities"}, headers=AUTH)
    assert "api_key" not in r.text
    assert RGB_ID in layers_of(r.content)


def test_anonymous_callers_see_the_public_layers(app: TestClient) -> None:
    r = app.get("/api-user/wmts?request=GetCapabilities")
    assert r.status_code == 200, r.text
    assert set(layers_of(r.content)) == {RGB_ID}


@pytest.mark.parametrize("suffix", [".png", ".webp", ".jpg"])
def test_tiles_are_rtiles(app: TestClient, suffix: str) -> None:
    media = {".png": "image/png", ".webp": "image/webp", ".jpg": "image/jpeg"}[suffix]
    rtile = app.get(tile_url(RGB_ID, TILE["z"], TILE["x"], TILE["y"], suffix=suffix), headers=AUTH)
    z, x, y = TILE["z"], TILE["x"], TILE["y"]
    rest = app.get(
        f"/api-user/wmts/1.0.0/{RGB_ID}/default/GoogleMapsCompatible/{z}/{y}/{x}{suffix}",
        headers=AUTH,
    )
    kvp = app.get(
        "/api/v1/wmts",
        params={
            "Service": "WMTS",
            "request": "GetTile",
            "version": "1.0.0",
            "layer": RGB_ID,
            "style": "default",
            "tilematrixset": "GoogleMapsCompatible",
            "TileMatrix": z,
            "TileRow": y,
            "TileCol": x,
            "format": media,
        },
        headers=AUTH,
    )
    for r in (rest, kvp):
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == media
        assert r.headers["etag"] == rtile.headers["etag"]
        assert r.headers["x-cache"] == "HIT"
        assert np.array_equal(decode(r.content), decode(rtile.content))
    assert decode(rest.content)[:3].max() > 0


def test_anonymous_tile_of_the_public_layer(app: TestClient) -> None:
    r = app.get(f"/api-user/wmts/1.0.0/{RGB_ID}/default/GoogleMapsCompatible/8/110/72.png")
    assert r.status_code == 200
    r = app.get(f"/api-user/wmts/1.0.0/{WORLD_ID}/default/GoogleMapsCompatible/0/0/0.png")
    assert r.status_code == 401
    assert exception_of(r) == ("NoApplicableCode", None)


@pytest.mark.parametrize(
    ("params", "status", "code", "locator"),
    [
        ({}, 400, "MissingParameterValue", "REQUEST"),
        ({"request": "GetMap"}, 400, "OperationNotSupported", "REQUEST"),
        ({"request": "GetTile", "layer": RGB_ID}, 400, "MissingParameterValue", "TILEMATRIXSET"),
        (
            {
                "request": "GetTile",
                "layer": "nope",
                "tilematrix": 0,
                "tilerow": 0,
                "tilecol": 0,
                "format": "image/png",
                "tilematrixset": "GoogleMapsCompatible",
            },
            404,
            "InvalidParameterValue",
            "LAYER",
        ),
        (
            {
                "request": "GetTile",
                "layer": RGB_ID,
                "tilematrix": 2,
                "tilerow": 4,
                "tilecol": 0,
                "format": "image/png",
                "tilematrixset": "GoogleMapsCompatible",
            },
            400,
            "TileOutOfRange",
            "TILEROW",
        ),
        (
            {
                "request": "GetTile",
                "layer": RGB_ID,
                "tilematrix": 2,
                "tilerow": 0,
                "tilecol": 0,
                "format": "image/gif",
                "tilematrixset": "GoogleMapsCompatible",
            },
            400,
            "InvalidParameterValue",
            "FORMAT",
        ),
    ],
)
def test_errors_are_exception_reports(
    app: TestClient, params: dict[str, Any], status: int, code: str, locator: str
) -> None:
    r = app.get("/api-user/wmts", params=params, headers=AUTH)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/xml")
    assert exception_of(r) == (code, locator)
    assert "Traceback" not in r.text


def test_a_hidden_layer_is_404_as_xml(app: TestClient) -> None:
    params: dict[str, Any] = {
        "request": "GetTile",
        "layer": WORLD_ID,
        "tilematrix": 0,
        "tilerow": 0,
        "tilecol": 0,
        "format": "image/png",
        "tilematrixset": "GoogleMapsCompatible",
    }
    r = app.get("/api-user/wmts", params=params)  # anonymous: the world raster is private
    assert r.status_code == 404
    assert exception_of(r) == ("InvalidParameterValue", "LAYER")
    assert WORLD_ID not in r.text
