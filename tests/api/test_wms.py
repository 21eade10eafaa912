"""WMS 1.3.0 (issue 24, section 3): capabilities read as XML against the layers, maps equal to
``rtile``'s BBOX renders, EPSG:4326's axis order, ``TRANSPARENT``, errors as
``ServiceExceptionReport`` XML with their codes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree as ET

import numpy as np
import pytest
import redis
from starlette.testclient import TestClient

from shared.settings import Settings
from tests.checks import ADMIN_KEY, AUTH
from tests.layers import RGB_ID, WORLD_ID, decode
from tests.ows import ows_app

NS = {"wms": "http://www.opengis.net/wms", "ogc": "http://www.opengis.net/ogc"}
XLINK = "{http://www.w3.org/1999/xlink}href"
#: a box of the scene, taller than wide (EPSG:3857), and one in degrees
BOX_3857 = (-8600000.0, 2800000.0, -8560000.0, 2870000.0)
LON_LAT = (-77.3, 24.2, -77.0, 24.7)


@pytest.fixture(scope="module")
def app(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> Iterator[TestClient]:
    with ows_app(settings, rdb) as client:
        yield client


def get_map(app: TestClient, headers: Mapping[str, str] = AUTH, **params: Any) -> Any:
    query = {
        "SERVICE": "WMS",
        "VERSION": "1.3.0",
        "REQUEST": "GetMap",
        "LAYERS": RGB_ID,
        "STYLES": "",
        "FORMAT": "image/png",
        "WIDTH": 200,
        "HEIGHT": 350,
        "CRS": "EPSG:3857",
        "BBOX": ",".join(map(str, BOX_3857)),
        **params,
    }
    return app.get("/api-user/wms", params=query, headers=headers)


def exception_of(r: Any) -> tuple[str | None, str | None]:
    root = ET.fromstring(r.content)
    assert root.tag == "{http://www.opengis.net/ogc}ServiceExceptionReport"
    assert root.get("version") == "1.3.0"
    (exception,) = root.findall("ogc:ServiceException", NS)
    assert exception.text
    return exception.get("code"), exception.get("locator")


def test_capabilities_list_the_layers(app: TestClient) -> None:
    r = app.get(f"/api/v1/wms?service=WMS&request=GetCapabilities&api_key={ADMIN_KEY}")
    assert r.status_code == 200, r.text
    root = ET.fromstring(r.content)
    assert (root.tag, root.get("version")) == (
        "{http://www.opengis.net/wms}WMS_Capabilities",
        "1.3.0",
    )
    layers = {
        e.findtext("wms:Name", namespaces=NS): e
        for e in root.findall("wms:Capability/wms:Layer/wms:Layer", NS)
    }
    assert {RGB_ID, WORLD_ID} <= set(layers)
    tj = app.get(f"/api-user/rtile/{RGB_ID}/tilejson.json", headers=AUTH).json()
    w, s, e, n = tj["bounds"]
    layer = layers[RGB_ID]
    geo = layer.find("wms:EX_GeographicBoundingBox", NS)
    assert geo is not None
    assert float(geo.findtext("wms:westBoundLongitude", namespaces=NS) or 0) == pytest.approx(w)
    assert float(geo.findtext("wms:northBoundLatitude", namespaces=NS) or 0) == pytest.approx(n)
    boxes = {
        b.get("CRS"): [float(b.get(k) or 0) for k in ("minx", "miny", "maxx", "maxy")]
        for b in layer.findall("wms:BoundingBox", NS)
    }
    assert boxes["CRS:84"] == pytest.approx([w, s, e, n])
    assert boxes["EPSG:4326"] == pytest.approx([s, w, n, e])  # latitude first
    assert boxes["EPSG:3857"][0] == pytest.approx(w * 20037508.342789244 / 180)
    assert layer.findtext("wms:Style/wms:Name", namespaces=NS) == "default"
    formats = [f.text for f in root.findall("wms:Capability/wms:Request/wms:GetMap/wms:Format", NS)]
    assert formats == ["image/png", "image/webp", "image/jpeg"]
    hrefs = [e.get(XLINK) or "" for e in root.iter() if e.get(XLINK)]
    assert len(hrefs) == 4  # the service, GetCapabilities, GetMap, GetFeatureInfo
    for href in hrefs:
        assert href.startswith("http://testserver/api/v1/wms?")
        assert parse_qs(urlsplit(href).query)["api_key"] == [ADMIN_KEY]


def test_anonymous_capabilities_show_the_public_layers(app: TestClient) -> None:
    root = ET.fromstring(app.get("/api-user/wms?request=GetCapabilities&version=1.1.1").content)
    names = [e.text for e in root.iter("{http://www.opengis.net/wms}Name")]
    assert names == ["WMS", RGB_ID, "default"]
    assert "api_key" not in app.get("/api-user/wms?REQUEST=GetCapabilities", headers=AUTH).text


@pytest.mark.parametrize("media", ["image/png", "image/webp", "image/jpeg"])
def test_a_map_is_the_bbox_render(app: TestClient, media: str) -> None:
    extension = {"image/png": "png", "image/webp": "webp", "image/jpeg": "jpg"}[media]
    bbox = ",".join(map(str, BOX_3857))
    rtile = app.get(
        f"/api-user/rtile/{RGB_ID}/en/0/0/0.{extension}",
        params={"BBOX": bbox, "width": 200, "height": 350},
        headers=AUTH,
    )
    r = get_map(app, FORMAT=media, TRANSPARENT="TRUE")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == media
    pixels = decode(r.content)
    assert pixels.shape[1:] == (350, 200)
    assert pixels[:3].max() > 0
    assert np.array_equal(pixels, decode(rtile.content))


def test_lower_case_names_and_anonymous_maps_of_public_layers(app: TestClient) -> None:
    bbox = ",".join(map(str, BOX_3857))
    query = (
        f"service=WMS&request=GetMap&layers={RGB_ID}&styles=default&format=image/png"
        f"&width=200&height=350&crs=EPSG:3857&bbox={bbox}&transparent=true"
    )
    r = app.get(f"/api-user/wms?{query}")
    assert r.status_code == 200, r.text
    assert np.array_equal(decode(r.content), decode(get_map(app, TRANSPARENT="TRUE").content))


def test_epsg_4326_is_latitude_first(app: TestClient) -> None:
    w, s, e, n = LON_LAT
    crs84 = get_map(app, CRS="CRS:84", BBOX=f"{w},{s},{e},{n}", TRANSPARENT="TRUE")
    epsg = get_map(app, CRS="EPSG:4326", BBOX=f"{s},{w},{n},{e}", TRANSPARENT="TRUE")
    swapped = get_map(app, CRS="CRS:84", BBOX=f"{s},{w},{n},{e}", TRANSPARENT="TRUE")
    assert crs84.status_code == epsg.status_code == 200, epsg.text
    assert decode(crs84.content)[:3].max() > 0
    assert np.array_equal(decode(crs84.content), decode(epsg.content))
    assert decode(swapped.content)[3].max() == 0  # the box read lon/lat: far from the scene


def test_opaque_maps_are_drawn_over_the_background(app: TestClient) -> None:
    clear = decode(get_map(app, TRANSPARENT="TRUE").content).astype(float)
    assert clear[3].min() == 0  # the box reaches beyond the scene
    cases: list[tuple[dict[str, Any], tuple[int, int, int]]] = [
        ({}, (255, 255, 255)),
        ({"BGCOLOR": "0x00FF80"}, (0, 255, 128)),
    ]
    for params, colour in cases:
        r = get_map(app, **params)
        assert r.status_code == 200, r.text
        opaque = decode(r.content).astype(float)
        assert (opaque[3] == 255).all() if len(opaque) == 4 else len(opaque) == 3  # opaque
        opaque = opaque[:3]
        alpha = clear[3:4] / 255
        expected = clear[:3] * alpha + np.array(colour, float)[:, None, None] * (1 - alpha)
        assert np.abs(opaque - expected).max() <= 1


@pytest.mark.parametrize(
    ("params", "code", "locator"),
    [
        ({"CRS": "EPSG:32618"}, "InvalidCRS", "CRS"),
        ({"FORMAT": "image/gif"}, "InvalidFormat", "FORMAT"),
        ({"WIDTH": "100000"}, "InvalidParameterValue", "WIDTH"),
        ({"HEIGHT": "0"}, "InvalidParameterValue", "HEIGHT"),
        ({"VERSION": "1.1.1"}, "InvalidParameterValue", "VERSION"),
        ({"STYLES": "fancy"}, "StyleNotDefined", "STYLES"),
        ({"BBOX": "1,2,3"}, "InvalidParameterValue", "BBOX"),
        ({"BBOX": None}, "MissingParameterValue", "BBOX"),
        ({"LAYERS": f"{RGB_ID},{RGB_ID}"}, "InvalidParameterValue", "LAYERS"),
        ({"REQUEST": "DescribeLayer"}, "OperationNotSupported", "REQUEST"),
    ],
)
def test_bad_requests_are_exception_reports(
    app: TestClient, params: dict[str, Any], code: str, locator: str
) -> None:
    r = get_map(app, **params)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("text/xml")
    assert exception_of(r) == (code, locator)


@pytest.mark.parametrize("layers", [WORLD_ID, f"{RGB_ID},{WORLD_ID}", "nope"])
def test_hidden_layers_are_404_as_xml(app: TestClient, layers: str) -> None:
    r = get_map(app, headers={}, LAYERS=layers)
    assert r.status_code == 404, r.text
    assert exception_of(r) == ("LayerNotDefined", "LAYERS")
    assert WORLD_ID not in r.text
