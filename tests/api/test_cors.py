"""CORS: any origin reads the read routes by default; preflights; explicit origins; the proxy."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from starlette.testclient import TestClient

from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.conftest import app_client
from tests.layers import RGB_ID, tile_url

ORIGIN = "https://maps.other.example"
READ_PATHS = [
    "/api-user/openapi.json",
    "/api/v1/openapi.json",
    tile_url(RGB_ID, 10, 290, 442),
    "/api-user/gis-datasource/public.countries",
    "/api/v1/gis-datasource/public.countries",
    "/api-user/vtile/public.countries/1/0/0.pbf",
    "/api-user/geojson/public.test_lines",
]
PROXY_PATHS = ["/api-user/gis-url-proxy", "/api/v1/gis-url-proxy"]


def variant(settings: Settings, **update: str) -> Settings:
    return settings.model_copy(update=update)


@pytest.fixture(scope="module")
def tc(settings: Settings, layers: None, vector_tables: str) -> Iterator[TestClient]:
    """The API with the default CORS setting (``*``), raster layers and vector tables there."""
    with app_client(variant(settings)) as client:
        yield client


def preflight(
    tc: TestClient, path: str, origin: str = ORIGIN, method: str = "GET", headers: str = ""
) -> httpx.Response:
    sent = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        sent["Access-Control-Request-Headers"] = headers
    r: httpx.Response = tc.options(path, headers=sent)
    return r


def listed(value: str) -> set[str]:
    return {item.strip().lower() for item in value.split(",")}


def test_default_setting_is_any_origin(settings: Settings) -> None:
    assert settings.auth.cors_origins == ("*",)


@pytest.mark.parametrize("path", READ_PATHS)
def test_read_routes_answer_any_origin(tc: TestClient, path: str) -> None:
    r = tc.get(path, headers={"Origin": ORIGIN, **AUTH})
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in r.headers
    exposed = listed(r.headers["access-control-expose-headers"])
    assert {"etag", "x-cache", "x-request-id", "x-job-id", "location", "retry-after"} <= exposed
    assert {"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"} <= exposed


def test_no_origin_no_cors_headers(tc: TestClient) -> None:
    r = tc.get("/api-user/openapi.json", headers=AUTH)
    assert r.status_code == 200
    assert "access-control-allow-origin" not in r.headers
    assert "access-control-expose-headers" not in r.headers


def test_errors_are_readable_cross_origin(tc: TestClient) -> None:
    """A 404 and the Host check's 400 carry CORS too: a page can read why it failed."""
    r = tc.get("/api-user/gis-datasource/public.nothing", headers={"Origin": ORIGIN, **AUTH})
    assert r.status_code == 404
    assert r.headers["access-control-allow-origin"] == "*"
    r = tc.get("/api-user/health", headers={"Origin": ORIGIN, "Host": "evil.example"})
    assert_error(r.json(), "invalid-host")
    assert r.status_code == 400
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["x-request-id"]


def test_refused_credentials_are_readable_cross_origin(tc: TestClient) -> None:
    """CORS sits outside authentication: a page sees the 401, not a network error."""
    r = tc.get(READ_PATHS[3], headers={"Origin": ORIGIN, "Authorization": "ApiKey wrong"})
    assert r.status_code == 401
    assert r.headers["access-control-allow-origin"] == "*"
    assert "www-authenticate" in listed(r.headers["access-control-expose-headers"])


@pytest.mark.parametrize(
    ("path", "method", "headers"),
    [
        (tile_url(RGB_ID, 10, 290, 442), "GET", "authorization"),
        ("/api-user/gis-datasource/public.countries", "GET", "Authorization, If-None-Match"),
        ("/api/v1/openapi.json", "GET", "authorization"),
        ("/api-user/pdf-merge", "POST", "authorization,content-type"),
        ("/api-user/jobs/some-job/events", "GET", "last-event-id"),
        ("/api-user/vtile/public.countries/cache", "DELETE", "authorization"),
    ],
)
def test_preflight_for_authorization_is_answered(
    tc: TestClient, path: str, method: str, headers: str
) -> None:
    r = preflight(tc, path, method=method, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in r.headers
    allowed = listed(r.headers["access-control-allow-headers"])
    assert {"authorization", "content-type", "last-event-id", "if-none-match"} <= allowed
    assert {"get", "head", "post", "put", "delete", "options"} <= listed(
        r.headers["access-control-allow-methods"]
    )
    assert int(r.headers["access-control-max-age"]) > 0
    assert r.headers["x-request-id"]  # inside the request-id middleware: preflights have one


def test_preflight_refuses_other_headers_and_methods(tc: TestClient) -> None:
    path = "/api-user/gis-datasource/public.countries"
    assert preflight(tc, path, headers="authorization, x-secret").status_code == 400
    assert preflight(tc, path, method="PATCH").status_code == 400


def test_explicit_origins_echo_listed_ones_with_credentials(settings: Settings) -> None:
    listed_origins = "https://a.example, https://b.example/"  # a trailing slash is dropped
    with app_client(variant(settings, cors_origins=listed_origins)) as client:
        for origin in ("https://a.example", "https://b.example"):
            r = client.get("/api-user/openapi.json", headers={"Origin": origin, **AUTH})
            assert r.headers["access-control-allow-origin"] == origin
            assert r.headers["access-control-allow-credentials"] == "true"
            assert "origin" in listed(r.headers["vary"])
            r = preflight(client, "/api-user/health", origin, headers="authorization")
            assert r.status_code == 200
            assert r.headers["access-control-allow-origin"] == origin
            assert r.headers["access-control-allow-credentials"] == "true"
        for origin in ("https://evil.example", "https://a.example.evil.example", "null"):
            r = client.get("/api-user/openapi.json", headers={"Origin": origin, **AUTH})
            assert r.status_code == 200
            assert "access-control-allow-origin" not in r.headers
            r = preflight(client, "/api-user/health", origin, headers="authorization")
            assert r.status_code == 400
            assert "access-control-allow-origin" not in r.headers


def test_star_in_a_list_means_any_origin_without_credentials(settings: Settings) -> None:
    with app_client(variant(settings, cors_origins="https://a.example,*")) as client:
        r = client.get("/api-user/openapi.json", headers={"Origin": "https://z.example", **AUTH})
        assert r.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-credentials" not in r.headers
        r = preflight(client, "/api-user/health", "https://a.example", headers="authorization")
        assert r.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-credentials" not in r.headers


def test_empty_setting_allows_no_origin(settings: Settings) -> None:
    with app_client(variant(settings, cors_origins="")) as client:
        r = client.get("/api-user/openapi.json", headers={"Origin": ORIGIN, **AUTH})
        assert r.status_code == 200
        assert "access-control-allow-origin" not in r.headers
        assert preflight(client, "/api-user/health").status_code == 400


def proxied(psettings: Settings, fake_base: str, **update: str) -> Settings:
    """Settings under which ``gis-url-proxy`` fetches from the fake provider server."""
    port = fake_base.rsplit(":", 1)[1]
    return variant(
        psettings,
        proxy_allow_hosts="127.0.0.1",
        proxy_trusted_addresses=f"127.0.0.1:{port}",
        **update,
    )


def png_via(fake_base: str) -> dict[str, str]:
    return {"url": f"{fake_base}/proxy/typed?type=image/png&body=png"}


@pytest.mark.parametrize("path", PROXY_PATHS)
def test_proxy_keeps_its_own_cors(psettings: Settings, fake_base: str, path: str) -> None:
    """The global ``*`` does not reach ``gis-url-proxy``: it answers by its own (empty) rule."""
    with app_client(proxied(psettings, fake_base)) as client:
        r = client.get(path, params=png_via(fake_base), headers={"Origin": ORIGIN, **AUTH})
        assert (r.status_code, r.content) == (200, b"png")
        assert r.headers["x-content-type-options"] == "nosniff"  # the proxy's own headers
        assert "access-control-allow-origin" not in r.headers
        assert "access-control-expose-headers" not in r.headers
        r = client.get(path, headers={"Origin": ORIGIN, **AUTH})
        assert r.status_code == 400  # no url: an error answer, no CORS either
        assert "access-control-allow-origin" not in r.headers
        r = preflight(client, path, headers="authorization")
        assert r.status_code in (401, 405)  # no preflight answer: the app alone decides
        assert "access-control-allow-origin" not in r.headers
        assert "access-control-allow-headers" not in r.headers


def test_proxy_and_global_origins_stay_apart(psettings: Settings, fake_base: str) -> None:
    both = proxied(
        psettings,
        fake_base,
        cors_origins="https://app.example",
        proxy_cors_origins="https://px.example",
    )
    with app_client(both) as client:
        for path in PROXY_PATHS:
            sent = {"Origin": "https://px.example", **AUTH}
            r = client.get(path, params=png_via(fake_base), headers=sent)
            assert r.status_code == 200
            assert r.headers["access-control-allow-origin"] == "https://px.example"
            assert "access-control-allow-credentials" not in r.headers
            sent = {"Origin": "https://app.example", **AUTH}
            r = client.get(path, params=png_via(fake_base), headers=sent)
            assert r.status_code == 200
            assert "access-control-allow-origin" not in r.headers
        r = client.get("/api-user/health", headers={"Origin": "https://app.example", **AUTH})
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        assert r.headers["access-control-allow-credentials"] == "true"
        r = client.get("/api-user/health", headers={"Origin": "https://px.example", **AUTH})
        assert "access-control-allow-origin" not in r.headers
