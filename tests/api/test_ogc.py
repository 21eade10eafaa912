"""OGC API – Common and – Tiles (issue 24, part 2): the landing page, conformance, collections,
tile matrix sets, tilesets and tiles, against the OGC standards' fields and against ``rtile`` and
``vtile`` (the same tiles, from the same cache); both mounts; private layers as every layer route
treats them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import rasterio
import redis
from rasterio.warp import transform_bounds
from starlette.testclient import TestClient

from api.app import create_app
from api.ogc_common import FEATURES_CONFORMANCE
from shared.raster.paths import encode_id
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.layers import RGB, RGB_ID, configure, decode, tile_url

MOUNTS = ("/api-user", "/api/v1")
CRS84 = "http://www.opengis.net/def/crs/OGC/1.3/CRS84"
REL = "http://www.opengis.net/def/rel/ogc/1.0/"
TMS_URI = "http://www.opengis.net/def/tilematrixset/OGC/1.0/WebMercatorQuad"
WORLD_ID = encode_id("single/world.rgb.tif")
#: a tile of the Landsat scene: zoom, row, column (OGC's order) and the rtile's z/x/y
Z, ROW, COL = 8, 110, 72


@pytest.fixture(scope="module")
def app(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, vector_tables: str
) -> Iterator[TestClient]:
    """The API with the scene and the world raster configured (every layer private)."""
    for rel in (RGB, "single/world.rgb.tif"):
        configure(settings, rdb, rel)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def key(app: TestClient) -> str:
    """A reader's key limited to the scene and the points."""
    body = {"name": "ogc", "role": "reader", "layers": [RGB_ID, "public.test_points"]}
    r = app.post("/api-user/api-keys", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    found: str = r.json()["key"]
    return found


def links_by_rel(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {link["rel"]: link for link in doc["links"]}


def path_of(url: str) -> str:
    """The path and query of an absolute link, to ask it of the test client."""
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc) == ("http", "testserver"), url
    return parts.path + (f"?{parts.query}" if parts.query else "")


@pytest.mark.parametrize("mount", MOUNTS)
@pytest.mark.parametrize("path", ["/ogc", "/ogc/"])
def test_landing_page_links_what_ogc_api_common_asks(
    app: TestClient, key: str, mount: str, path: str
) -> None:
    r = app.get(f"{mount}{path}", params={"api_key": key})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert "no-store" in r.headers["cache-control"]  # its links carry the key
    doc = r.json()
    assert doc["title"]
    assert doc["description"]
    rels = links_by_rel(doc)
    base = f"http://testserver{mount}"
    expected = {
        "self": (f"{base}/ogc", "application/json"),
        "service-desc": (f"{base}/openapi.json", "application/vnd.oai.openapi+json;version=3.1"),
        "conformance": (f"{base}/ogc/conformance", "application/json"),
        "data": (f"{base}/ogc/collections", "application/json"),
        f"{REL}tiling-schemes": (f"{base}/ogc/tileMatrixSets", "application/json"),
    }
    assert set(rels) == set(expected)
    for rel, (url, media) in expected.items():
        assert rels[rel]["href"] == f"{url}?api_key={key}", rel
        assert rels[rel]["type"] == media
    openapi = app.get(path_of(rels["service-desc"]["href"])).json()
    assert openapi["openapi"].startswith("3.1")  # what the link's type says


def test_conformance_lists_what_is_implemented(app: TestClient) -> None:
    doc = app.get("/api-user/ogc/conformance").json()
    classes = doc["conformsTo"]
    assert len(classes) == len(set(classes))
    tiles = "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/"
    common = "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/"
    for name in ("core", "tileset", "tilesets-list", "geodata-tilesets", "mvt", "png", "jpeg"):
        assert tiles + name in classes
    for name in ("core", "landing-page", "json", "html", "oas30"):
        assert common + name in classes
    assert "http://www.opengis.net/spec/ogcapi-common-2/1.0/conf/collections" in classes
    assert set(FEATURES_CONFORMANCE) <= set(classes)
    assert not any("webp" in c for c in classes)  # OGC has no WebP class
    assert app.get("/api-user/ogc/conformance", params={"f": "xml"}).status_code == 400


@pytest.mark.parametrize("mount", MOUNTS)
def test_collections_are_the_layers_the_key_sees(
    app: TestClient, raster_dir: Path, key: str, mount: str
) -> None:
    r = app.get(f"{mount}/ogc/collections", params={"api_key": key})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert links_by_rel(doc)["self"]["href"].endswith(f"{mount}/ogc/collections?api_key={key}")
    by_id = {c["id"]: c for c in doc["collections"]}
    assert set(by_id) == {"public.test_points", RGB_ID}  # not the world raster, not the lines
    raster, vector = by_id[RGB_ID], by_id["public.test_points"]
    with rasterio.open(raster_dir / RGB) as ds:
        bounds = transform_bounds(ds.crs, "EPSG:4326", *ds.bounds, densify_pts=21)
    # a raster collection (tiles only): its extent in the tiles' CRS, named (GDAL reads it so)
    assert raster["extent"]["spatial"]["crs"] == "http://www.opengis.net/def/crs/EPSG/0/3857"
    in_3857 = transform_bounds("EPSG:4326", "EPSG:3857", *bounds)
    assert raster["extent"]["spatial"]["bbox"] == [pytest.approx(list(in_3857), abs=0.01)]
    assert (raster["title"], raster["dataType"]) == (RGB, "map")
    assert "itemType" not in raster
    assert raster["layerDataType"] == "Raster"  # GDAL's OAPIF lists it as no feature layer
    assert "layerDataType" not in vector
    assert (vector["dataType"], vector["itemType"]) == ("vector", "feature")
    west, south, east, north = vector["extent"]["spatial"]["bbox"][0]
    assert (west, south) == pytest.approx((-10, 40), abs=1e-6)  # the points' corner
    base = f"http://testserver{mount}/ogc/collections"
    raster_links, vector_links = links_by_rel(raster), links_by_rel(vector)
    assert set(raster_links) == {"self", f"{REL}tilesets-map"}
    assert set(vector_links) == {"self", "items", f"{REL}tilesets-vector"}
    assert vector_links["items"]["href"] == f"{base}/public.test_points/items?api_key={key}"
    assert vector_links["items"]["type"] == "application/geo+json"
    assert raster_links[f"{REL}tilesets-map"]["href"] == f"{base}/{RGB_ID}/tiles?api_key={key}"
    # each collection's self link answers the same description
    one = app.get(path_of(raster_links["self"]["href"]))
    assert one.status_code == 200, one.text
    assert one.json() == raster


def test_private_layers_stay_hidden(app: TestClient, key: str) -> None:
    anonymous = app.get("/api-user/ogc/collections")
    assert anonymous.status_code == 200
    assert anonymous.json()["collections"] == []  # every layer is private here
    for path in (
        f"/api-user/ogc/collections/{RGB_ID}",
        f"/api-user/ogc/collections/{RGB_ID}/tiles/WebMercatorQuad",
        f"/api-user/ogc/collections/{RGB_ID}/tiles/WebMercatorQuad/{Z}/{ROW}/{COL}.png",
        "/api-user/ogc/collections/public.test_points/tiles/WebMercatorQuad/4/5/7.mvt",
    ):
        r = app.get(path)
        assert r.status_code == 401, (path, r.text)
        assert_error(r.json(), "unauthorized")
    for path in (
        f"/api-user/ogc/collections/{WORLD_ID}",
        f"/api-user/ogc/collections/{WORLD_ID}/tiles/WebMercatorQuad/1/0/0.png",
        "/api-user/ogc/collections/public.test_lines/tiles",
        "/api-user/ogc/collections/nope/tiles",
    ):
        r = app.get(path, params={"api_key": key})  # hidden or unknown: one answer
        assert r.status_code == 404, (path, r.text)
        assert_error(r.json(), "not-found")
        assert "world" not in r.text
        assert "test_lines" not in r.text


def test_tile_matrix_sets(app: TestClient) -> None:
    listing = app.get("/api/v1/ogc/tileMatrixSets").json()
    (tms,) = listing["tileMatrixSets"]
    assert (tms["id"], tms["uri"]) == ("WebMercatorQuad", TMS_URI)
    definition = app.get(path_of(links_by_rel(tms)["self"]["href"])).json()
    assert (definition["id"], definition["uri"]) == ("WebMercatorQuad", TMS_URI)
    assert definition["crs"] == "http://www.opengis.net/def/crs/EPSG/0/3857"
    matrices = definition["tileMatrices"]
    assert [m["id"] for m in matrices] == [str(z) for z in range(25)]
    assert [m["matrixWidth"] for m in matrices[:3]] == [1, 2, 4]
    assert matrices[0]["pointOfOrigin"] == pytest.approx([-20037508.3427892, 20037508.3427892])
    assert matrices[0]["cellSize"] == pytest.approx(156543.03392804097)
    # the TMS 1.0 names GDAL 3.6 reads
    assert (definition["identifier"], definition["supportedCRS"]) == (tms["id"], tms["crs"])
    assert matrices[3]["topLeftCorner"] == matrices[3]["pointOfOrigin"]
    r = app.get("/api/v1/ogc/tileMatrixSets/WorldCRS84Quad")
    assert r.status_code == 404
    assert_error(r.json(), "not-found")


def test_a_raster_tileset_and_its_tiles_are_rtile_s(app: TestClient, key: str) -> None:
    tilesets = app.get(f"/api-user/ogc/collections/{RGB_ID}/tiles", params={"api_key": key})
    assert tilesets.status_code == 200, tilesets.text
    (summary,) = tilesets.json()["tilesets"]
    assert (summary["dataType"], summary["tileMatrixSetURI"]) == ("map", TMS_URI)
    tileset = app.get(path_of(links_by_rel(summary)["self"]["href"])).json()
    assert tileset["crs"] == "http://www.opengis.net/def/crs/EPSG/0/3857"
    assert tileset["tileMatrixSetURI"] == TMS_URI
    # in the tile matrix set's CRS, as GDAL reads it: the layer's bounds in EPSG:3857
    box = tileset["boundingBox"]
    assert box["crs"] == "http://www.opengis.net/def/crs/EPSG/0/3857"
    collection = app.get(f"/api-user/ogc/collections/{RGB_ID}", params={"api_key": key}).json()
    (expected,) = collection["extent"]["spatial"]["bbox"]  # in EPSG:3857 already
    assert [*box["lowerLeft"], *box["upperRight"]] == pytest.approx(expected, abs=0.01)
    limits = {int(m["tileMatrix"]): m for m in tileset["tileMatrixSetLimits"]}
    assert sorted(limits) == list(range(10))  # the layer's zooms (its own is 9)
    assert limits[Z]["minTileRow"] <= ROW <= limits[Z]["maxTileRow"]
    assert limits[Z]["minTileCol"] <= COL <= limits[Z]["maxTileCol"]
    scheme = links_by_rel(tileset)[f"{REL}tiling-scheme"]
    assert path_of(scheme["href"]) == f"/api-user/ogc/tileMatrixSets/WebMercatorQuad?api_key={key}"
    items = {link["type"]: link for link in tileset["links"] if link["rel"] == "item"}
    assert set(items) == {"image/png", "image/webp", "image/jpeg"}
    for media, link in items.items():
        assert link["templated"] is True
        assert "{tileMatrix}/{tileRow}/{tileCol}" in link["href"]
        assert parse_qs(urlsplit(link["href"]).query) == {"api_key": [key]}
        url = link["href"].format(tileMatrix=Z, tileRow=ROW, tileCol=COL)
        r = app.get(path_of(url))
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == media
        assert decode(r.content)[:3].max() > 0  # the scene
    # the PNG tile is rtile's: the same bytes and ETag, from the same cache
    rtile = app.get(tile_url(RGB_ID, Z, COL, ROW), headers=AUTH)
    assert rtile.headers["x-cache"] == "HIT"  # the OGC tile above stored it
    forms = [
        f"/api/v1/ogc/collections/{RGB_ID}/tiles/WebMercatorQuad/{Z}/{ROW}/{COL}.png",
        f"/api/v1/ogc/collections/{RGB_ID}/tiles/WebMercatorQuad/{Z}/{ROW}/{COL}",
        f"/api/v1/ogc/collections/{RGB_ID}/tiles/WebMercatorQuad/{Z}/{ROW}/{COL}?f=png",
    ]
    for form in forms:
        ogc = app.get(form, headers=AUTH)
        assert ogc.status_code == 200, ogc.text
        assert (ogc.content, ogc.headers["etag"]) == (rtile.content, rtile.headers["etag"])
        assert ogc.headers["x-cache"] == "HIT"
        assert (decode(ogc.content) == decode(rtile.content)).all()
    again = app.get(forms[0], headers={**AUTH, "If-None-Match": rtile.headers["etag"]})
    assert again.status_code == 304
    jpeg = app.get(forms[1], params={"f": "jpeg"}, headers=AUTH)
    jpg = app.get(tile_url(RGB_ID, Z, COL, ROW, suffix=".jpg"), headers=AUTH)
    assert jpeg.content == jpg.content


@pytest.mark.parametrize(
    ("path", "status", "named"),
    [
        ("8/110/256.png", 404, "x"),  # column past the zoom's last: no such tile
        ("8/256/72", 404, "y"),
        ("25/0/0.png", 400, "tileMatrix"),  # past the last zoom, as rtile
        ("8/110/72.mvt", 400, "format"),  # a raster collection has no MVT
        ("8/110/72.gif", 400, "format"),
    ],
)
def test_tiles_that_are_not(app: TestClient, path: str, status: int, named: str) -> None:
    r = app.get(f"/api-user/ogc/collections/{RGB_ID}/tiles/WebMercatorQuad/{path}", headers=AUTH)
    assert r.status_code == status, r.text
    body = assert_error(r.json(), "not-found" if status == 404 else "invalid-input")
    assert body["detail"]["parameter"] == named
    if status == 404:
        assert "no such tile" in body["message"]


def test_a_vector_tile_is_vtile_s(app: TestClient, key: str) -> None:
    tileset = app.get(
        "/api-user/ogc/collections/public.test_points/tiles/WebMercatorQuad",
        params={"api_key": key},
    ).json()
    assert tileset["dataType"] == "vector"
    (item,) = [link for link in tileset["links"] if link["rel"] == "item"]
    assert item["type"] == "application/vnd.mapbox-vector-tile"
    url = item["href"].format(tileMatrix=4, tileRow=5, tileCol=7)
    raw = {"Accept-Encoding": "identity"}
    ogc = app.get(path_of(url), headers=raw)
    vtile = app.get("/api-user/vtile/public.test_points/4/7/5.pbf", headers={**AUTH, **raw})
    assert ogc.status_code == vtile.status_code == 200, ogc.text
    assert ogc.headers["content-type"] == "application/vnd.mapbox-vector-tile"
    assert ogc.content == vtile.content
    assert b"point 1" in ogc.content
    assert vtile.headers["x-cache"] == "HIT"  # the OGC tile stored it
    empty = app.get(
        "/api-user/ogc/collections/public.test_points/tiles/WebMercatorQuad/4/0/0",
        params={"api_key": key},
    )
    assert empty.status_code == 204  # no point there, as vtile answers
    png = app.get(path_of(url.replace(".mvt", ".png")))
    assert png.status_code == 400
    assert png.json()["error"]["detail"]["parameter"] == "format"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [v or "" for k, v in attrs if tag == "a" and k == "href"]


@pytest.mark.parametrize("asked", [{"params": {"f": "html"}}, {"headers": {"Accept": "text/html"}}])
def test_html_pages_are_escaped_and_link_alike(
    app: TestClient, key: str, asked: dict[str, Any]
) -> None:
    url = f"/api-user/ogc/collections/{RGB_ID}/tiles/WebMercatorQuad"
    doc = app.get(url, params={"api_key": key}).json()
    params = {"api_key": key, **asked.get("params", {})}
    page = app.get(url, params=params, headers=asked.get("headers", {}))
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    parser = _Links()
    parser.feed(page.text)
    assert parser.hrefs == [link["href"] for link in doc["links"]]
    assert "{tileMatrix}" in page.text
    assert '"tileMatrixSetURI"' not in page.text
    assert "&quot;tileMatrixSetURI&quot;" in page.text
    assert not re.search(r"<(?!/?(html|head|meta|title|body|h1|p|ul|li|a|pre)\b)", page.text[15:])
