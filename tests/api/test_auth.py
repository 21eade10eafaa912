"""Authentication and authorisation end to end (spec 5): every scheme, every refusal, quotas.

Each test calls the real app (Redis, PostgreSQL with the auth tables, the real routes); the
admin key of the test settings makes users, keys and clients through the admin API.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import psycopg
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from shared.auth.tokens import signing_keys
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.conftest import pg, served
from tests.layers import MOSAIC_ID, RGB_ID, tile_url

PASSWORD = "correct horse battery"
RASTERS = "/api-user/gis-raster"


@pytest.fixture(scope="module")
def auth_settings(settings: Settings) -> Settings:
    """The suite's settings with the Landsat scene public and a short login lock."""
    return settings.model_copy(
        update={
            "public_layers": RGB_ID,
            "login_max_failures": 3,
            "login_lock_s": 60,
            "login_address_max_failures": 1000,  # the per-address throttle has a test of its own
        }
    )


@pytest.fixture(scope="module")
def anon(auth_settings: Settings, layers: None) -> Iterator[TestClient]:
    """A client that sends no credentials unless a request gives some."""
    with TestClient(create_app(auth_settings), raise_server_exceptions=False) as client:
        yield client


def admin(anon: TestClient, method: str, path: str, **kw: Any) -> Any:
    """An admin API call that must succeed; its JSON body."""
    r = anon.request(method, f"/api-user{path}", headers=AUTH, **kw)
    assert r.status_code in (200, 201), r.text
    return r.json()


def new_user(anon: TestClient, role: str = "reader", layers: list[str] | None = None) -> str:
    login = f"u-{uuid.uuid4().hex[:10]}"
    body = {"login": login, "password": PASSWORD, "role": role, "layers": layers}
    user = admin(anon, "POST", "/users", json=body)
    assert user["login"] == login
    assert user["role"] == role
    assert "password" not in str(user)
    return login


def new_key(anon: TestClient, role: str = "reader", layers: list[str] | None = None) -> str:
    made = admin(anon, "POST", "/api-keys", json={"name": "t", "role": role, "layers": layers})
    assert made["key"].startswith("msk_")
    assert made["prefix"]
    assert made["key"].startswith(made["prefix"])
    return str(made["key"])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(login: str, password: str) -> dict[str, str]:
    raw = base64.b64encode(f"{login}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


def login_token(anon: TestClient, login: str) -> str:
    r = anon.post("/api/auth", json={"login": login, "password": PASSWORD})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"id", "login", "token"}
    assert body["login"] == login
    return str(body["token"])


# -- who may call what ---------------------------------------------------------------------


def test_without_credentials_only_the_open_routes_answer(anon: TestClient) -> None:
    for path in ("/api-user/health", "/api-user/openapi.json", "/api/v1/health"):
        assert anon.get(path).status_code == 200, path
    for method, path in (
        ("GET", f"/api-user/gis-raster-info/{RGB_ID}"),
        ("GET", "/api-user/geocode?q=Kyiv"),
        ("GET", "/api-user/events"),
        ("POST", "/api-user/diag/probe"),  # a job start
        ("DELETE", f"/api-user/jobs/{uuid.uuid4()}"),
        ("GET", "/api-user/users"),
        ("GET", tile_url(MOSAIC_ID, 8, 72, 110)),  # not a public layer
    ):
        r = anon.request(method, path)
        assert r.status_code == 401, (method, path, r.text)
        assert_error(r.json(), "unauthorized")
        assert "Bearer" in r.headers["www-authenticate"], path
    # nothing was started: the anonymous probe left no job behind
    assert anon.get("/api-user/health").status_code == 200


def test_public_layers_answer_anonymously_and_others_privately(anon: TestClient) -> None:
    public = anon.get(tile_url(RGB_ID, 8, 72, 110))
    assert public.status_code == 200
    assert public.content.startswith(b"\x89PNG")
    assert public.headers["cache-control"].startswith("public")
    key = new_key(anon)
    private = anon.get(tile_url(MOSAIC_ID, 8, 72, 110), headers=bearer(key))
    assert private.status_code == 200
    assert private.content.startswith(b"\x89PNG")
    # an answer some callers may not see is never kept by a shared cache
    assert private.headers["cache-control"].startswith("private")


@pytest.mark.usefixtures("vector_tables")
def test_answers_holding_a_key_are_never_stored_and_private_ones_never_shared(
    anon: TestClient,
) -> None:
    """The wrapper says it, whatever a handler said: an answer whose links carry the caller's
    ``api_key`` is ``no-store``; an answer about a layer that is not public is ``private``."""
    key = new_key(anon)
    for mount in ("/api-user", "/api/v1"):
        for path in (
            f"/rtile/{MOSAIC_ID}/tilejson.json",
            "/gis-datasource/public.countries",
            "/ogc/collections",
            "/ogc/collections/public.countries",
            "/wmts/1.0.0/WMTSCapabilities.xml",
            "/wms?SERVICE=WMS&REQUEST=GetCapabilities",
        ):
            r = anon.get(f"{mount}{path}{'&' if '?' in path else '?'}api_key={key}")
            assert r.status_code == 200, (path, r.text)
            assert key in r.text, path  # the answer holds the key...
            assert r.headers["cache-control"] == "no-store", path  # ...so nobody keeps it
        for path in (
            f"/gis-raster-stat/{MOSAIC_ID}",
            f"/gis-raster-info/{MOSAIC_ID}",
            f"/rtile/{MOSAIC_ID}/legend.json",
            f"/rtile/{MOSAIC_ID}/point/-77.5,24.5",
            "/geojson/public.test_lines",
            "/ogc/collections/public.test_lines/items",
            tile_url(MOSAIC_ID, 8, 72, 110).removeprefix("/api-user"),
        ):
            r = anon.get(mount + path, headers=bearer(key))
            assert r.status_code in (200, 404), (path, r.text)  # a point outside: 404
            cache = r.headers.get("cache-control", "")
            assert "private" in cache or "no-store" in cache, (path, cache)
            assert "public" not in cache, (path, cache)
    # the public layer's answers stay public
    assert anon.get(tile_url(RGB_ID, 8, 72, 110)).headers["cache-control"].startswith("public")


def test_anonymous_listings_show_the_public_layers_and_the_folders_to_them(
    anon: TestClient,
) -> None:
    top = anon.get(RASTERS)
    assert top.status_code == 200, top.text
    everything = anon.get(RASTERS, headers=AUTH).json()["rows"]
    # the public layer is single/RGB.byte.tif: of the top folders, only `single` leads to it
    assert [(row["path"], row["type"]) for row in top.json()["rows"]] == [("single", "dir")]
    assert len(everything) > 1
    inside = anon.get(f"{RASTERS}?folder=single").json()["rows"]
    assert [row["id"] for row in inside] == [RGB_ID]
    assert len(anon.get(f"{RASTERS}?folder=single", headers=AUTH).json()["rows"]) > 1


def test_an_api_key_in_every_accepted_form(anon: TestClient) -> None:
    key = new_key(anon)
    forms: list[dict[str, Any]] = [
        {"params": {"api_key": key}},
        {"headers": bearer(key)},
        {"headers": {"Authorization": f"ApiKey {key}"}},
        {"headers": {"Authorization": key}},
    ]
    for form in forms:
        r = anon.get(RASTERS, **form)
        assert r.status_code == 200, (form, r.text)
        assert "rows" in r.json()


def test_a_key_never_shows_again_and_a_revoked_key_is_refused(anon: TestClient) -> None:
    key = new_key(anon)
    assert anon.get(RASTERS, headers=bearer(key)).status_code == 200
    listed = admin(anon, "GET", "/api-keys")
    mine = [k for k in listed if key.startswith(k["prefix"])]
    assert mine
    assert all("key" not in k for k in listed)
    assert key not in str(listed)
    r = anon.delete(f"/api-user/api-keys/{mine[0]['id']}", headers=AUTH)
    assert r.status_code == 200
    revoked = r.json()
    assert revoked["id"] == mine[0]["id"]
    assert revoked["revoked_at"] is not None
    refused = anon.get(RASTERS, headers=bearer(key))  # at once: kept lookups are retired
    assert refused.status_code == 401
    assert_error(refused.json(), "unauthorized")
    assert 'error="invalid_token"' in refused.headers["www-authenticate"]
    assert anon.get(RASTERS, headers=AUTH).status_code == 200  # others unaffected


def test_delete_revokes_a_key_which_stays_listed_as_revoked(anon: TestClient) -> None:
    key = new_key(anon)
    key_id = next(k["id"] for k in admin(anon, "GET", "/api-keys") if key.startswith(k["prefix"]))
    revoked = admin(anon, "DELETE", f"/api-keys/{key_id}")
    again = admin(anon, "DELETE", f"/api-keys/{key_id}")  # the first revocation time is kept
    assert again["revoked_at"] == revoked["revoked_at"]
    assert key_id not in [k["id"] for k in admin(anon, "GET", "/api-keys")]
    for yes in ("1", "true", "yes", "TRUE"):
        listed = admin(anon, "GET", f"/api-keys?revoked={yes}")
        assert [k["revoked_at"] for k in listed if k["id"] == key_id] == [revoked["revoked_at"]]
    for no in ("0", "false", "no"):
        assert key_id not in [k["id"] for k in admin(anon, "GET", f"/api-keys?revoked={no}")]
    r = anon.get("/api-user/api-keys?revoked=maybe", headers=AUTH)
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "revoked"
    r = anon.delete("/api-user/api-keys/nosuchkey", headers=AUTH)
    assert r.status_code == 404
    assert_error(r.json(), "not-found")


def test_roles_and_layer_limits(anon: TestClient) -> None:
    reader = new_key(anon, "reader")
    r = anon.post("/api-user/diag/probe", headers=bearer(reader))  # starting a job: operator
    assert r.status_code == 403
    assert_error(r.json(), "forbidden")
    assert anon.get("/api-user/users", headers=bearer(reader)).status_code == 403
    operator = new_key(anon, "operator")
    assert anon.get("/api-user/users", headers=bearer(operator)).status_code == 403

    limited = new_key(anon, "reader", layers=[MOSAIC_ID])
    assert anon.get(tile_url(MOSAIC_ID, 8, 72, 110), headers=bearer(limited)).status_code == 200
    # another layer does not exist for this key (unless it is public)
    hidden = f"/api-user/gis-raster-info/{encode('single/world.rgb.tif')}"
    r = anon.get(hidden, headers=bearer(limited))
    assert r.status_code == 404
    assert_error(r.json(), "not-found")
    assert anon.get(hidden, headers=AUTH).status_code == 200
    # a listing shows only the layers the key may see
    rows = anon.get(f"{RASTERS}?folder=single", headers=bearer(limited)).json()["rows"]
    everything = anon.get(f"{RASTERS}?folder=single", headers=AUTH).json()["rows"]
    assert len(rows) < len(everything)
    assert all(row["id"] in (MOSAIC_ID, RGB_ID) for row in rows if "id" in row)


def encode(rel: str) -> str:
    return base64.urlsafe_b64encode(rel.encode()).decode().rstrip("=")


# -- Basic, login, JWT ---------------------------------------------------------------------


def test_basic_login_and_wrong_password(anon: TestClient) -> None:
    login = new_user(anon)
    assert anon.get(RASTERS, headers=basic(login, PASSWORD)).status_code == 200
    r = anon.get(RASTERS, headers=basic(login, "wrong password"))
    assert r.status_code == 401
    assert_error(r.json(), "unauthorized")
    r = anon.get(RASTERS, headers={"Authorization": "Basic !!notbase64"})
    assert r.status_code == 401
    for nul in (f"{login}\x00", "\x00"):  # no login holds a NUL: refused, never a 500
        r = anon.get(RASTERS, headers=basic(nul, PASSWORD))
        assert r.status_code == 401, r.text
        assert_error(r.json(), "unauthorized")
    assert anon.get(RASTERS, headers=basic(login, PASSWORD)).status_code == 200


def test_login_gives_a_jwt_that_works_and_forgeries_that_do_not(
    anon: TestClient, auth_settings: Settings
) -> None:
    login = new_user(anon, "reader")
    token = login_token(anon, login)
    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert header["alg"] == "HS256"
    assert header["kid"]
    assert claims["login"] == login
    assert anon.get(RASTERS, headers=bearer(token)).status_code == 200

    keys = signing_keys(auth_settings)
    now = int(time.time())
    good = {**claims, "iat": now, "exp": now + 60}
    admin_claims = {**good, "role": "admin"}
    forged = {
        "alg none": jwt.encode(admin_claims, key="", algorithm="none"),
        "wrong secret": jwt.encode(
            admin_claims, "x" * 40, algorithm="HS256", headers={"kid": keys.kid}
        ),
        "unknown kid": jwt.encode(
            good, keys.current_secret(), algorithm="HS256", headers={"kid": "nope"}
        ),
        "expired": jwt.encode(
            {**good, "iat": now - 120, "exp": now - 60},
            keys.current_secret(),
            algorithm="HS256",
            headers={"kid": keys.kid},
        ),
        "HS512": jwt.encode(
            good, keys.current_secret(), algorithm="HS512", headers={"kid": keys.kid}
        ),
    }
    head, payload, signature = token.split(".")
    raised = base64.urlsafe_b64encode(
        jwt.utils.base64url_decode(payload).replace(b'"reader"', b'"admin"')
    )
    forged["tampered payload"] = f"{head}.{raised.decode().rstrip('=')}.{signature}"
    for name, bad in forged.items():
        r = anon.get("/api-user/users", headers=bearer(bad))
        assert r.status_code == 401, (name, r.text)
        assert_error(r.json(), "invalid-token")


@pytest.mark.parametrize("prefix", ["", "/api-user", "/api/v1"])
def test_the_login_answers_at_the_root_and_under_each_mount(anon: TestClient, prefix: str) -> None:
    login = new_user(anon)
    # credentials of another kind beside the login form are not read: the form is the login's
    r = anon.post(
        f"{prefix}/api/auth", json={"login": login, "password": PASSWORD}, headers=bearer("junk")
    )
    assert r.status_code == 200, r.text
    assert r.json()["login"] == login
    assert anon.get(RASTERS, headers=bearer(r.json()["token"])).status_code == 200
    r = anon.post(f"{prefix}/api/auth", json={"login": login, "password": "wrong password"})
    assert r.status_code == 401
    assert_error(r.json(), "unauthorized")


def test_brute_force_on_a_login_is_throttled(anon: TestClient) -> None:
    login = new_user(anon)
    wrong = {"login": login, "password": "not it at all"}
    statuses = [anon.post("/api/auth", json=wrong).status_code for _ in range(3)]
    assert statuses[:2] == [401, 401]  # the third failure locks the account
    r = anon.post("/api/auth", json={"login": login, "password": PASSWORD})  # right, but locked
    assert r.status_code == 429
    error = assert_error(r.json(), "account-locked")
    assert int(r.headers["retry-after"]) >= 1
    # Basic logins of that account are locked too
    assert anon.get(RASTERS, headers=basic(login, PASSWORD)).status_code == 429
    # an unknown login is told the same thing, in the same words
    ghost = {"login": f"ghost-{uuid.uuid4().hex[:8]}", "password": "whatever it is"}
    for _ in range(3):
        anon.post("/api/auth", json=ghost)
    r = anon.post("/api/auth", json=ghost)
    assert r.status_code == 429
    assert assert_error(r.json(), "account-locked")["message"] == error["message"]


def test_failed_logins_from_one_address_are_throttled(settings: Settings, layers: None) -> None:
    strict = settings.model_copy(update={"login_address_max_failures": 2, "login_lock_s": 60})
    address = f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250)}"
    app = create_app(strict)
    with TestClient(app, raise_server_exceptions=False, client=(address, 40000)) as client:
        logins = [new_user(client) for _ in range(3)]
        for login in logins[:2]:  # two accounts, one wrong password each
            r = client.post("/api/auth", json={"login": login, "password": "nope nope nope"})
            assert r.status_code == 401
        r = client.post("/api/auth", json={"login": logins[2], "password": PASSWORD})
        assert r.status_code == 429
        assert_error(r.json(), "rate-limited")
        assert int(r.headers["retry-after"]) >= 1


# -- OAuth 2.0 -----------------------------------------------------------------------------


def new_client(anon: TestClient, *, public: bool, redirect: str = "https://app.example/cb") -> Any:
    body = {"name": "map app", "redirect_uris": [redirect], "public": public}
    client = admin(anon, "POST", "/oauth-clients", json=body)
    assert (client["client_secret"] is None) == public
    return client


def token(anon: TestClient, **form: str) -> Any:
    return anon.post("/oauth/token", data=form)


def test_password_grant_and_refresh_rotation_with_replay_detection(anon: TestClient) -> None:
    login = new_user(anon)
    client = new_client(anon, public=False)
    cid, secret = client["client_id"], client["client_secret"]
    wrong = token(anon, grant_type="password", client_id=cid, client_secret="nope",
                  username=login, password=PASSWORD)  # fmt: skip
    assert wrong.status_code == 401
    assert wrong.json()["error"] == "invalid_client"
    r = token(anon, grant_type="password", client_id=cid, client_secret=secret,
              username=login, password=PASSWORD)  # fmt: skip
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["token_type"] == "Bearer"
    assert first["expires_in"] > 0
    assert r.headers["cache-control"] == "no-store"
    wrong_password = token(anon, grant_type="password", client_id=cid, client_secret=secret,
                           username=login, password="not the password")  # fmt: skip
    assert wrong_password.status_code == 400
    assert wrong_password.json()["error"] == "invalid_grant"
    assert anon.get(RASTERS, headers=bearer(first["access_token"])).status_code == 200

    rotated = token(anon, grant_type="refresh_token", client_id=cid, client_secret=secret,
                    refresh_token=first["refresh_token"]).json()  # fmt: skip
    assert rotated["refresh_token"] != first["refresh_token"]
    # the used token again: refused, and its whole family is dead
    replay = token(anon, grant_type="refresh_token", client_id=cid, client_secret=secret,
                   refresh_token=first["refresh_token"])  # fmt: skip
    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    dead = token(anon, grant_type="refresh_token", client_id=cid, client_secret=secret,
                 refresh_token=rotated["refresh_token"])  # fmt: skip
    assert dead.status_code == 400
    assert dead.json()["error"] == "invalid_grant"
    # client credentials in HTTP Basic work as well (RFC 6749 2.3.1)
    form = {"grant_type": "password", "username": login, "password": PASSWORD}
    r = anon.post("/api-user/oauth/token", headers=basic(cid, secret), data=form)
    assert r.status_code == 200, r.text


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


def authorize(anon: TestClient, client_id: str, redirect: str, challenge: str, login: str) -> str:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect,
        "state": "s-1",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    page = anon.get("/oauth/authorize", params=query)
    assert page.status_code == 200
    assert "<form" in page.text
    assert "map app" in page.text
    assert page.headers["x-frame-options"] == "DENY"
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', page.text))
    assert fields["client_id"] == client_id
    r = anon.post(
        "/oauth/authorize",
        data={**fields, "login": login, "password": PASSWORD, "decision": "allow"},
        follow_redirects=False,
    )
    assert r.status_code == 302, r.text
    target = urlsplit(r.headers["location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == redirect
    got = parse_qs(target.query)
    assert got["state"] == ["s-1"]
    return got["code"][0]


def test_authorization_code_with_pkce(anon: TestClient) -> None:
    login = new_user(anon)
    redirect = "https://app.example/cb"
    client = new_client(anon, public=True, redirect=redirect)
    cid = client["client_id"]
    verifier, challenge = pkce()
    code = authorize(anon, cid, redirect, challenge, login)
    wrong = token(anon, grant_type="authorization_code", client_id=cid, code=code,
                  redirect_uri=redirect, code_verifier=pkce()[0])  # fmt: skip
    assert wrong.status_code == 400
    assert wrong.json()["error"] == "invalid_grant"

    code = authorize(anon, cid, redirect, challenge, login)
    elsewhere = token(anon, grant_type="authorization_code", client_id=cid, code=code,
                      redirect_uri="https://evil.example/cb", code_verifier=verifier)  # fmt: skip
    assert elsewhere.status_code == 400
    assert elsewhere.json()["error"] == "invalid_grant"

    code = authorize(anon, cid, redirect, challenge, login)
    r = token(anon, grant_type="authorization_code", client_id=cid, code=code,
              redirect_uri=redirect, code_verifier=verifier)  # fmt: skip
    assert r.status_code == 200, r.text
    assert anon.get(RASTERS, headers=bearer(r.json()["access_token"])).status_code == 200
    reused = token(anon, grant_type="authorization_code", client_id=cid, code=code,
                   redirect_uri=redirect, code_verifier=verifier)  # fmt: skip
    assert reused.status_code == 400
    assert reused.json()["error"] == "invalid_grant"


def test_authorize_never_redirects_to_an_unregistered_uri(anon: TestClient) -> None:
    client = new_client(anon, public=True, redirect="https://app.example/cb")
    query = {"response_type": "code", "client_id": client["client_id"],
             "redirect_uri": "https://evil.example/cb", "code_challenge": pkce()[1],
             "code_challenge_method": "S256"}  # fmt: skip
    r = anon.get("/oauth/authorize", params=query, follow_redirects=False)
    assert r.status_code == 400
    assert "location" not in r.headers
    assert "redirect_uri" in r.text


def test_a_public_client_must_use_pkce(anon: TestClient) -> None:
    login = new_user(anon)
    redirect = "https://app.example/cb"
    client = new_client(anon, public=True, redirect=redirect)
    form = {"response_type": "code", "client_id": client["client_id"], "redirect_uri": redirect,
            "login": login, "password": PASSWORD, "decision": "allow"}  # fmt: skip
    r = anon.post("/oauth/authorize", data=form, follow_redirects=False)
    assert r.status_code == 302
    assert parse_qs(urlsplit(r.headers["location"]).query)["error"] == ["invalid_request"]


def test_the_authorize_endpoint_answers_as_rfc_6749_says(anon: TestClient) -> None:
    """Another response type or a refusal goes back to the redirect URI with the error and the
    state; a malformed request (no client) is refused without a redirect."""
    redirect = "https://app.example/cb"
    cid = new_client(anon, public=True, redirect=redirect)["client_id"]
    asked = {"client_id": cid, "redirect_uri": redirect, "state": "s-2"}
    r = anon.get("/oauth/authorize", params={**asked, "response_type": "token"},
                 follow_redirects=False)  # fmt: skip
    assert r.status_code == 302
    back = parse_qs(urlsplit(r.headers["location"]).query)
    assert back == {"error": ["unsupported_response_type"], "state": ["s-2"]}
    r = anon.post("/api-user/oauth/authorize", data={**asked, "decision": "deny"},
                  follow_redirects=False)  # fmt: skip
    assert r.status_code == 302
    back = parse_qs(urlsplit(r.headers["location"]).query)
    assert back == {"error": ["access_denied"], "state": ["s-2"]}
    no_client = {"response_type": "code", "redirect_uri": redirect}
    for r in (
        anon.get("/oauth/authorize", params=no_client, follow_redirects=False),
        anon.post("/oauth/authorize", data=no_client, follow_redirects=False),
    ):
        assert r.status_code == 400, r.text
        assert "location" not in r.headers
        assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "client_id"


def test_the_token_endpoint_words_a_malformed_form_as_rfc_6749_does(anon: TestClient) -> None:
    client = new_client(anon, public=False)
    cid, secret = client["client_id"], client["client_secret"]
    for form, error in (
        ({}, "invalid_request"),  # no grant_type
        ({"grant_type": "client_credentials"}, "unsupported_grant_type"),
        ({"grant_type": "password", "username": "ann"}, "invalid_request"),  # no password
        ({"grant_type": "refresh_token", "refresh_token": ""}, "invalid_request"),
        ({"grant_type": "authorization_code", "code": "c"}, "invalid_request"),  # no redirect_uri
    ):
        r = token(anon, client_id=cid, client_secret=secret, **form)
        assert r.status_code == 400, form
        assert r.json()["error"] == error, (form, r.text)
    r = token(anon, grant_type="password", username="ann")
    assert r.json()["error_description"] == "password is required"
    r = token(anon, grant_type="password", username="ann", password=PASSWORD)  # no client
    assert r.json() == {"error": "invalid_request", "error_description": "client_id is required"}


def test_the_login_takes_a_form_and_names_what_is_missing(anon: TestClient) -> None:
    login = new_user(anon)
    for name in ("login", "user", "username"):
        r = anon.post("/api/auth", data={name: login, "password": PASSWORD})
        assert r.status_code == 200, (name, r.text)
        assert r.json()["login"] == login
    r = anon.post("/api/auth", json={"user": login, "password": ""})
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "password"


def test_the_admin_api_refuses_malformed_parameters_and_bodies(anon: TestClient) -> None:
    for path, parameter in (
        ("/users/0", "id"),
        ("/users/x", "id"),
        ("/users?ord=password", "ord"),
        ("/api-keys?role=root", "role"),
        ("/oauth-clients?ord=secret", "ord"),
    ):
        r = anon.get(f"/api-user{path}", headers=AUTH)
        assert r.status_code == 400, path
        assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter
    for method, path, body, parameter in (
        ("POST", "/users", {"login": "a", "password": "short"}, "password"),
        ("POST", "/api-keys", {"name": "k", "secret": "x"}, "secret"),  # unknown fields too
        ("PUT", "/oauth-clients/nosuchclient", {"grant_types": ["implicit"]}, "grant_types.0"),
    ):
        r = anon.request(method, f"/api-user{path}", json=body, headers=AUTH)
        assert r.status_code == 400, (path, r.text)
        assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter
    # ordered by a column the document lists, newest first
    keys = admin(anon, "GET", "/api-keys?ord=-last_used")
    assert isinstance(keys, list)


# -- jobs, quotas, storage -----------------------------------------------------------------


def test_a_job_is_its_creators_and_the_operators(anon: TestClient, worker: object) -> None:
    operator = new_key(anon, "operator")
    r = anon.post("/api-user/diag/probe?steps=1&async=1", headers=bearer(operator))
    assert r.status_code == 202, r.text
    job = r.headers["x-job-id"]
    assert anon.get(f"/api-user/jobs/{job}", headers=bearer(operator)).status_code in (200, 202)
    assert anon.get(f"/api-user/jobs/{job}", headers=AUTH).status_code in (200, 202)
    reader = new_key(anon, "reader")
    for method, path in (("GET", f"/api-user/jobs/{job}"), ("DELETE", f"/api-user/jobs/{job}"),
                         ("GET", f"/api-user/jobs/{job}/events")):  # fmt: skip
        r = anon.request(method, path, headers=bearer(reader))
        assert r.status_code == 404, (method, r.text)
    assert anon.get("/api-user/events", headers=bearer(reader)).status_code == 403


def test_rate_limits_answer_429_with_retry_after(settings: Settings, layers: None) -> None:
    tight = settings.model_copy(update={"rate_data_per_min": 3})
    with TestClient(create_app(tight), raise_server_exceptions=False) as client:
        key = new_key(client)
        answers = [client.get(RASTERS, headers=bearer(key)) for _ in range(4)]
        assert [a.status_code for a in answers[:3]] == [200, 200, 200]
        assert answers[0].headers["ratelimit-limit"] == "3"
        assert answers[3].status_code == 429
        assert_error(answers[3].json(), "rate-limited")
        assert int(answers[3].headers["retry-after"]) >= 1
        # another caller has a budget of its own
        assert client.get(RASTERS, headers=bearer(new_key(client))).status_code == 200


def test_the_database_keeps_no_secret_in_clear(anon: TestClient, database_url: str) -> None:
    login = new_user(anon)
    key = new_key(anon)
    client = new_client(anon, public=False)
    r = token(anon, grant_type="password", client_id=client["client_id"],
              client_secret=client["client_secret"], username=login, password=PASSWORD)  # fmt: skip
    refresh = r.json()["refresh_token"]
    with psycopg.connect(pg(database_url)) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'mapsvc_auth'"
        ).fetchall()
        dump = "".join(
            str(conn.execute(f'SELECT * FROM mapsvc_auth."{name}"').fetchall())
            for (name,) in tables
        )
    assert tables
    assert login in dump
    for secret in (PASSWORD, key, client["client_secret"], refresh):
        assert secret not in dump


def test_the_openapi_document_declares_the_schemes(anon: TestClient) -> None:
    doc = anon.get("/api-user/openapi.json").json()
    schemes = doc["components"]["securitySchemes"]
    assert schemes["apiKey"] == {"type": "apiKey", "in": "query", "name": "api_key"}
    assert schemes["bearer"]["scheme"] == "bearer"
    assert schemes["basic"]["scheme"] == "basic"
    assert schemes["oauth2"]["flows"]["password"]["tokenUrl"] == "/api-user/oauth/token"
    assert {"apiKey": []} in doc["security"]
    paths = doc["paths"]
    assert paths["/health"]["get"]["security"] == []  # open
    assert {} in paths["/geojson/{layer}"]["get"]["security"]  # public layers: optional
    for listing in ("/gis-raster", "/gis-datasource"):  # open; credentials show more
        assert {} in paths[listing]["get"]["security"]
        assert {"apiKey": []} in paths[listing]["get"]["security"]
    assert "security" not in paths["/users"]["get"]  # the document's: credentials needed
    assert {"401", "403", "429"} <= set(paths["/users"]["get"]["responses"])


def test_a_code_shown_again_revokes_the_tokens_it_gave(anon: TestClient) -> None:
    login = new_user(anon)
    redirect = "https://app.example/cb"
    cid = new_client(anon, public=True, redirect=redirect)["client_id"]
    verifier, challenge = pkce()
    code = authorize(anon, cid, redirect, challenge, login)
    form = {"grant_type": "authorization_code", "client_id": cid, "code": code,
            "redirect_uri": redirect, "code_verifier": verifier}  # fmt: skip
    first = token(anon, **form).json()
    assert token(anon, **form).json()["error"] == "invalid_grant"
    refreshed = token(anon, grant_type="refresh_token", client_id=cid,
                      refresh_token=first["refresh_token"])  # fmt: skip
    assert refreshed.status_code == 400
    assert refreshed.json()["error"] == "invalid_grant"


def test_every_scheme_against_a_live_server(auth_settings: Settings, anon: TestClient) -> None:
    login, key = new_user(anon), new_key(anon)
    client = new_client(anon, public=False)
    with served(auth_settings) as base:
        url = f"{base}/api-user/jobs"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, params={"api_key": key}).status_code == 200
        assert httpx.get(url, auth=(login, PASSWORD)).status_code == 200
        jwt_token = httpx.post(f"{base}/api/auth", json={"login": login, "password": PASSWORD})
        assert httpx.get(url, headers=bearer(jwt_token.json()["token"])).status_code == 200
        form = {"grant_type": "password", "username": login, "password": PASSWORD}
        auth = (client["client_id"], client["client_secret"])
        oauth = httpx.post(f"{base}/oauth/token", data=form, auth=auth).json()
        assert httpx.get(url, headers=bearer(oauth["access_token"])).status_code == 200


def test_oversized_login_token_and_admin_bodies_are_refused_before_read(anon: TestClient) -> None:
    big = {"login": "x", "password": "p" * (80 * 1024)}
    r = anon.post("/api/auth", json=big)
    assert r.status_code == 413
    assert_error(r.json(), "payload-too-large")
    r = anon.post("/api-user/users", json={**big, "role": "reader"}, headers=AUTH)
    assert r.status_code == 413
    assert_error(r.json(), "payload-too-large")
    r = anon.post("/oauth/token", data={"grant_type": "password", "password": "p" * 80_000})
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_request"  # the token endpoint answers RFC 6749's shape
    assert anon.get(RASTERS, headers=AUTH).status_code == 200  # nothing else changed
