"""The nginx front judges no credential (issue 21, classes 1 and 7, and nginx's part of class 3).

A fuzzer asks the front, as ``make run`` starts it before a real API, for a cached tile of a
layer that is not public in several hundred spellings: request-line encodings of the path and
the query, duplicate and empty parameters, ``#`` and ``?`` in odd places, both mounts, every
format, ``@2x``, with and without a language, header spellings and case, ``Authorization``
and ``api_key`` together, keys that are wrong, expired, revoked or of another layer, the admin
key — on ``rtile``'s URLs and on OGC API – Tiles' (the same file). No answer is a tile without
a credential valid for that layer; every refusal is the JSON error shape with ``X-Request-ID``;
each valid spelling gets the tile's bytes. Then: the spellings of one key share one tiles
budget whatever the URL, a private vector tile is never kept for anonymous callers, the front's
own refusals are JSON, its workers do not run as root and it writes no secret to its logs.
"""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from api.front import worker_user, write_front_config
from shared.settings import Settings
from tests.api.test_front import front, front_work
from tests.checks import ADMIN_KEY, AUTH, assert_error
from tests.conftest import free_port, served
from tests.layers import MOSAIC_ID, RGB_ID, tile_url

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx")

#: the tile asked for (a layer that is not public), and the variants cached: suffix -> file name
Z, X, Y = 8, 72, 110
SUFFIXES = {".png": "110.png", "@2x.png": "110@2x.png", ".webp": "110.webp", ".jpg": "110.jpg"}
#: every spelling of a variant in a URL (``.jpeg`` is the ``.jpg`` file)
URL_SUFFIXES = {**{s: s for s in SUFFIXES}, ".jpeg": ".jpg"}
MOUNTS = ("/api-user", "/api/v1")
LANGS = ("en/", "")  # the form without a language is the default language's file
#: the URLs of the tile: rtile's, OGC API – Tiles' (no language: the default one's file; no
#: @2x); what comes just before the layer in each
FAMILIES = {"rtile": "/rtile/", "ogc": "/collections/"}
#: the magic numbers of the tile formats: a refusal must carry none of them
IMAGE_MAGIC = (b"\x89PNG", b"RIFF", b"\xff\xd8\xff")

Header = tuple[str, str]


@dataclass(frozen=True)
class Keys:
    """The credentials the fuzzer spells: ``good`` may read the layer, the others may not."""

    good: str
    other: str  # limited to another layer
    revoked: str
    expired: str


@dataclass(frozen=True)
class Guarded:
    """The front before the API, a cached private tile in every variant, and the keys."""

    base: str
    api: str
    settings: Settings
    keys: Keys
    tiles: dict[str, bytes]  # URL suffix -> the cached file's bytes


@dataclass(frozen=True)
class Spelling:
    """One request for the tile: a path, a raw query, headers; whether it must get the tile."""

    name: str
    target: str
    headers: tuple[Header, ...]
    valid: bool
    suffix: str


def _key(api: str, layers: list[str] | None, **fields: Any) -> dict[str, Any]:
    body = {"name": "fuzz", "role": "reader", "layers": layers, **fields}
    made = httpx.post(f"{api}/api-user/api-keys", json=body, headers=AUTH)
    assert made.status_code == 201, made.text
    return dict(made.json())


def _make_keys(api: str) -> Keys:
    revoked = _key(api, [MOSAIC_ID])
    gone = httpx.delete(f"{api}/api-user/api-keys/{revoked['id']}", headers=AUTH)
    assert gone.status_code in (200, 204), gone.text
    return Keys(
        good=_key(api, [MOSAIC_ID])["key"],
        other=_key(api, [RGB_ID])["key"],
        revoked=revoked["key"],
        expired=_key(api, [MOSAIC_ID], expires_at="2001-01-01T00:00:00+00:00")["key"],
    )


@pytest.fixture(scope="module")
def guarded(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> Iterator[Guarded]:
    """The front (the API's yes kept 5 s) before the API; the mosaic's tile cached in every
    variant; the keys."""
    with front_work(settings, rdb, raster_dir) as work:
        mine = work.model_copy(
            update={"public_layers": RGB_ID, "port": free_port(), "front_access_ttl_s": 5}
        )
        with served(mine) as api, front(mine, api.removeprefix("http://")) as base:
            tiles = {}
            for suffix, name in SUFFIXES.items():
                rendered = httpx.get(
                    f"{api}{tile_url(MOSAIC_ID, Z, X, Y, suffix=suffix)}", headers=AUTH
                )
                assert rendered.status_code == 200, rendered.text
                cached = mine.dirs.rtile / MOSAIC_ID / "en" / str(Z) / str(X) / name
                assert cached.read_bytes() == rendered.content
                tiles[suffix] = rendered.content
            tiles[".jpeg"] = tiles[".jpg"]
            yield Guarded(base, api, mine, _make_keys(api), tiles)


def _send(base: str, target: str, headers: tuple[Header, ...] = ()) -> tuple[int, Any, bytes]:
    """``GET`` with exactly this request target and these header lines: status, headers, body."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest("GET", target, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        conn.endheaders()
        answer = conn.getresponse()
        return answer.status, answer.headers, answer.read()
    finally:
        conn.close()


def _basic(login: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode()


def _refused(keys: Keys) -> list[tuple[str, str, tuple[Header, ...]]]:
    """Credentials that must never read the tile: (name, raw query, headers)."""
    good, auth = keys.good, "Authorization"
    return [
        ("nothing", "", ()),
        ("a bare ?", "?", ()),
        ("?&", "?&", ()),
        ("an empty api_key", "?api_key=", ()),
        ("api_key without =", "?api_key", ()),
        ("the exploit: junk then #", "?api_key=x#", ()),
        ("junk, # and more", "?api_key=x#y", ()),
        ("# before ?", "#?api_key=x", ()),
        ("# right after ?", "?#api_key=x", ()),
        ("# alone", "#", ()),
        ("a valid key then #", f"?api_key={good}#", ()),
        ("# then a valid key", f"?x=1#&api_key={good}", ()),
        ("%23", "?api_key=%23", ()),
        ("junk%23", "?api_key=x%23", ()),
        ("%00", "?api_key=%00", ()),
        ("%00 before a valid key", f"?api_key=%00{good}", ()),
        ("a wrong key", "?api_key=msk_wrong", ()),
        ("a key of another layer", f"?api_key={keys.other}", ()),
        ("a revoked key", f"?api_key={keys.revoked}", ()),
        ("an expired key", f"?api_key={keys.expired}", ()),
        ("two keys", "?api_key=a&api_key=b", ()),
        ("a valid key twice", f"?api_key={good}&api_key={good}", ()),
        ("a valid key then an empty one", f"?api_key={good}&api_key=", ()),
        ("an empty key then a valid one", f"?api_key=&api_key={good}", ()),
        ("junk then a valid key", f"?api_key=junk&api_key={good}", ()),
        ("the name in capitals", f"?API_KEY={good}", ()),
        ("a space before the key", f"?api_key=+{good}", ()),
        ("after a semicolon", f"?x=1;api_key={good}", ()),
        ("an empty header", "", ((auth, ""),)),
        ("Bearer alone", "", ((auth, "Bearer"),)),
        ("Bearer and a space", "", ((auth, "Bearer "),)),
        ("ApiKey alone", "", ((auth, "ApiKey"),)),
        ("Basic alone", "", ((auth, "Basic"),)),
        ("Basic, empty password", "", ((auth, _basic("admin", "")),)),
        ("Basic, empty login", "", ((auth, _basic("", "secret")),)),
        ("Basic, not base64", "", ((auth, "Basic !!!"),)),
        ("Bearer wrong", "", ((auth, "Bearer msk_wrong"),)),
        ("Bearer, another layer", "", ((auth, f"Bearer {keys.other}"),)),
        ("Bearer, revoked", "", ((auth, f"Bearer {keys.revoked}"),)),
        ("ApiKey, expired", "", ((auth, f"ApiKey {keys.expired}"),)),
        ("an unknown scheme", "", ((auth, f"Token {good}"),)),
        ("two credentials in one header", "", ((auth, f"Bearer {good}, Bearer junk"),)),
        ("a key and #", "", ((auth, f"Bearer {good}#"),)),
        ("an unsigned token", "", ((auth, "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiJ9."),)),
        ("the header twice", "", ((auth, f"Bearer {good}"), (auth, "junk"))),
        ("a valid header twice", "", ((auth, f"Bearer {good}"), (auth, f"Bearer {good}"))),
        (
            "the header twice, in two cases",
            "",
            (("authorization", f"Bearer {good}"), ("AUTHORIZATION", f"Bearer {good}")),
        ),
        ("a valid header, a junk query", "?api_key=junk", ((auth, f"Bearer {good}"),)),
        ("a junk header, a valid query", f"?api_key={good}", ((auth, "Bearer junk"),)),
        ("a valid header and query", f"?api_key={good}", ((auth, f"Bearer {good}"),)),
        ("a key in another header", "", (("X-Api-Key", good),)),
    ]


def _accepted(keys: Keys) -> list[tuple[str, str, tuple[Header, ...]]]:
    """Spellings of valid credentials: each gets the tile."""
    good, auth = keys.good, "Authorization"
    first = f"%{ord(good[0]):02X}{good[1:]}"  # the key's first character %-encoded
    return [
        ("Bearer", "", ((auth, f"Bearer {good}"),)),
        ("bearer", "", ((auth, f"bearer {good}"),)),
        ("BEARER", "", ((auth, f"BEARER {good}"),)),
        ("Bearer, two spaces", "", ((auth, f"Bearer  {good}"),)),
        ("ApiKey", "", ((auth, f"ApiKey {good}"),)),
        ("apikey", "", ((auth, f"apikey {good}"),)),
        ("the key alone", "", ((auth, good),)),
        ("the header in lower case", "", (("authorization", f"Bearer {good}"),)),
        ("the header in capitals", "", (("AUTHORIZATION", f"Bearer {good}"),)),
        ("api_key", f"?api_key={good}", ()),
        ("api_key %-encoded", f"?api_key={first}", ()),
        ("the name %-encoded", f"?api%5Fkey={good}", ()),
        ("the admin key", "", ((auth, f"Bearer {ADMIN_KEY}"),)),
        ("the admin key as api_key", f"?api_key={ADMIN_KEY}", ()),
    ]


def _paths(family: str) -> list[tuple[str, str]]:
    """Every URL of the tile in ``family``: (path, URL suffix)."""
    if family == "ogc":
        return [
            (
                f"{mount}/ogc/collections/{MOSAIC_ID}/tiles/WebMercatorQuad/{Z}/{Y}/{X}{suffix}",
                suffix,
            )
            for mount, suffix in itertools.product(MOUNTS, URL_SUFFIXES)
            if "@" not in suffix
        ]
    return [
        (f"{mount}/rtile/{MOSAIC_ID}/{lang}{Z}/{X}/{Y}{suffix}", suffix)
        for mount, lang, suffix in itertools.product(MOUNTS, LANGS, URL_SUFFIXES)
    ]


def _encode_char(path: str, before: str, char: str) -> str:
    """``path`` with the first ``char`` after ``before`` %-encoded."""
    cut = path.index(before) + len(before)
    head, tail = path[:cut], path[cut:]
    return head + tail.replace(char, f"%{ord(char):02x}", 1)


#: ways of writing a path that nginx normalises to the same file: f(path, what comes just
#: before the layer)
PATH_SPELLINGS: dict[str, Callable[[str, str], str]] = {
    "as is": lambda p, _: p,
    "the style's first character %-encoded": lambda p, b: _encode_char(p, b, MOSAIC_ID[0]),
    "the dot of the extension %-encoded": lambda p, b: _encode_char(p, b, "."),
    "a slash %-encoded": lambda p, _: p.replace(f"{MOSAIC_ID}/", f"{MOSAIC_ID}%2F", 1),
    "a double slash": lambda p, b: p.replace(b, f"/{b}/", 1),
    "a dot segment": lambda p, b: p.replace(b, f"{b}./", 1),
    "a climb from a public layer": lambda p, b: p.replace(b, f"{b}{RGB_ID}/../", 1),
    "a climb after the layer": lambda p, _: p.replace(f"{MOSAIC_ID}/", f"{MOSAIC_ID}/x/%2e%2e/", 1),
}


def _spellings(keys: Keys, family: str) -> list[Spelling]:
    """Every credential on several URLs of the tile in ``family`` (all of them together), and
    every way of writing the path with no credential, the exploit and a valid key."""
    paths = _paths(family)
    found = []
    credentials = [(c, False) for c in _refused(keys)] + [(c, True) for c in _accepted(keys)]
    for i, ((name, query, headers), valid) in enumerate(credentials):
        for path, suffix in paths[i % 4 :: 4]:  # a quarter of the URLs each, every URL in turn
            found.append(Spelling(f"{name}: {path}{query}", path + query, headers, valid, suffix))
    core = [c for c in credentials if c[0][0] in ("nothing", "the exploit: junk then #", "Bearer")]
    for (how, spell), ((name, query, headers), valid), (path, suffix) in itertools.product(
        PATH_SPELLINGS.items(), core, paths
    ):
        target = spell(path, FAMILIES[family]) + query
        found.append(Spelling(f"{name}, {how}: {target}", target, headers, valid, suffix))
    return found


def _is_json_refusal(status: int, headers: Any, body: bytes) -> str:
    """What is wrong with a refusal ('' when it is a JSON error with a request id)."""
    if not 400 <= status < 500:
        return f"status {status}"
    if body.startswith(IMAGE_MAGIC):
        return "an image"
    if headers.get("content-type") != "application/json":
        return f"content-type {headers.get('content-type')}"
    if not headers.get("x-request-id"):
        return "no X-Request-ID"
    try:
        error = json.loads(body)["error"]
        shaped = set(json.loads(body)) == {"error"} and set(error) == {"code", "message", "detail"}
    except (ValueError, KeyError, TypeError):
        shaped = False
    return "" if shaped else f"not the error shape: {body[:200]!r}"


@pytest.mark.parametrize("family", FAMILIES)
def test_no_spelling_reads_a_cached_private_tile_without_a_valid_credential(
    guarded: Guarded, family: str
) -> None:
    spellings = _spellings(guarded.keys, family)
    assert len(spellings) > 300
    assert any(s.target.endswith("?api_key=x#") for s in spellings)  # the exploit of the issue
    wrong = []
    for spelling in spellings:
        status, headers, body = _send(guarded.base, spelling.target, spelling.headers)
        if spelling.valid:
            if status != 200 or body != guarded.tiles[spelling.suffix]:
                wrong.append(f"{spelling.name}: {status}, not the tile")
        elif problem := _is_json_refusal(status, headers, body):
            wrong.append(f"{spelling.name}: {problem}")
    assert not wrong, f"{len(wrong)} of {len(spellings)}:\n" + "\n".join(wrong[:40])


def test_the_api_names_one_principal_for_every_spelling_of_a_key(guarded: Guarded) -> None:
    made = _key(guarded.api, [MOSAIC_ID])
    key, access = made["key"], f"{guarded.api}/api-user/rtile/{MOSAIC_ID}/access"
    for kwargs in (
        {"headers": {"Authorization": f"Bearer {key}"}},
        {"headers": {"Authorization": f"bearer {key}"}},
        {"headers": {"Authorization": f"ApiKey {key}"}},
        {"headers": {"Authorization": key}},
        {"params": {"api_key": key}},
    ):
        yes = httpx.get(access, **kwargs)  # type: ignore[arg-type]
        assert yes.status_code == 204, kwargs
        assert yes.headers["x-principal"] == f"key:{made['id']}"


@pytest.mark.parametrize(
    ("query", "headers", "status"),
    [
        ("?api_key=", {}, 401),
        ("?api_key", {}, 401),
        ("?api_key=a&api_key=b", {}, 400),
        ("?api_key={good}&api_key={good}", {}, 400),
        ("?api_key={good}", {"Authorization": "Bearer {good}"}, 400),
        ("?api_key=junk", {"Authorization": "Bearer {good}"}, 400),
        ("", {"Authorization": "Bearer"}, 401),
        ("", {"Authorization": _basic("admin", "")}, 401),
    ],
    ids=[
        "an empty api_key",
        "api_key without a value",
        "two keys",
        "one key twice",
        "a header and a query alike",
        "a header and a query apart",
        "Bearer and nothing",
        "Basic with an empty password",
    ],
)
def test_the_api_takes_one_credential_per_request_and_no_empty_one(
    guarded: Guarded, query: str, headers: dict[str, str], status: int
) -> None:
    good = guarded.keys.good
    filled = {name: value.format(good=good) for name, value in headers.items()}
    target = tile_url(MOSAIC_ID, Z, X, Y) + query.format(good=good)
    answer = httpx.get(f"{guarded.api}{target}", headers=filled)
    assert answer.status_code == status
    assert_error(answer.json(), "invalid-input" if status == 400 else "unauthorized")


def test_the_spellings_of_one_key_share_one_tiles_budget(
    settings: Settings, rdb: redis.Redis, raster_dir: Path
) -> None:
    per_min = 3
    with front_work(settings, rdb, raster_dir) as work:
        mine = work.model_copy(
            update={"public_layers": RGB_ID, "port": free_port(), "rate_tiles_per_min": per_min}
        )
        with served(mine) as api, front(mine, api.removeprefix("http://")) as base:
            url = tile_url(MOSAIC_ID, Z, X, Y)
            ogc = f"/api-user/ogc/collections/{MOSAIC_ID}/tiles/WebMercatorQuad/{Z}/{Y}/{X}.png"
            assert httpx.get(f"{api}{url}", headers=AUTH).status_code == 200  # cached
            key, again, other = (_key(api, [MOSAIC_ID])["key"] for _ in range(3))
            spellings: list[tuple[str, tuple[Header, ...]]] = [
                ("", (("Authorization", f"Bearer {key}"),)),
                ("", (("Authorization", f"bearer {key}"),)),
                ("", (("Authorization", f"ApiKey {key}"),)),
                (f"?api_key={key}", ()),
                ("", (("Authorization", key),)),
            ]
            answers = [
                _send(base, path + query, headers)
                for path in (url, ogc)
                for query, headers in spellings
            ]
            statuses = [status for status, _, _ in answers]
            # one caller, whatever the URL: the budget's burst, then refusals; five budgets
            # (or one per URL) would refuse none
            assert statuses.count(200) <= per_min + 1, statuses
            assert statuses.count(429) == len(statuses) - statuses.count(200), statuses
            status, headers, body = next(a for a in answers if a[0] == 429)
            assert not _is_json_refusal(status, headers, body)
            assert_error(json.loads(body), "rate-limited")
            assert int(headers["retry-after"]) >= 1
            # the kept yes names the caller too: one spelling asked again and again is refused
            repeated = [
                _send(base, url, (("Authorization", f"Bearer {again}"),))[0] for _ in range(8)
            ]
            assert 429 in repeated, repeated
            # another key, and anonymous callers of a public layer, have budgets of their own
            assert _send(base, url, (("Authorization", f"Bearer {other}"),))[0] == 200
            assert httpx.get(f"{base}{tile_url(RGB_ID, Z, X, Y)}").status_code == 200
            run = mine.work_dir / "run"
            logs = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
            assert not any(key.encode() in text for text in logs.values()), list(logs)


@pytest.mark.parametrize(
    "template",
    [
        "/api-user/vtile/{layer}/1/0/0.pbf",
        "/api/v1/ogc/collections/{layer}/tiles/WebMercatorQuad/1/0/0.mvt",
    ],
    ids=["vtile", "ogc"],
)
def test_no_spelling_gets_a_private_vector_tile_or_spoils_a_kept_public_one(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, vector_tables: str, template: str
) -> None:
    public, private = "public.countries", "public.test_points"
    before = "/vtile/" if "/vtile/" in template else "/collections/"
    with front_work(settings, rdb, raster_dir) as work:
        mine = work.model_copy(
            update={
                "public_layers": f"{RGB_ID},{public}",
                "port": free_port(),
                "front_vtile_ttl_s": 60,
            }
        )
        with served(mine) as api, front(mine, api.removeprefix("http://")) as base:
            kept, secret = template.format(layer=public), template.format(layer=private)
            honest = _send(base, kept)  # kept by the front now
            assert honest[0] == 200
            _, _, tile = _send(base, secret, tuple(AUTH.items()))  # never kept
            assert b"point 1" in tile
            naming_the_private_layer = [
                secret,
                secret.replace(before, f"{before}{public}/../", 1),
                secret.replace(before, f"{before}{public}/%2e%2e/", 1),
                secret.replace(before, f"{before}{public}%2F..%2F", 1),
                secret.replace(f"{private}/", f"{private}/x/../", 1),
                _encode_char(secret, before, "p"),
                _encode_char(secret, before, "."),
            ]
            landing_on_the_public_layer = [
                kept.replace(before, f"{before}{private}/../", 1),
                kept.replace(before, f"{before}{private}%2F%2e%2e%2F", 1),
                kept.replace(f"{public}/", f"{public}/x/../", 1),
            ]
            wrong = []
            for target in naming_the_private_layer * 2:  # a kept answer would come the second time
                status, headers, body = _send(base, target)
                if problem := _is_json_refusal(status, headers, body):
                    wrong.append(f"{target}: {problem}")
            for target in landing_on_the_public_layer * 2:
                status, headers, body = _send(base, target)
                if body == tile or (status == 200 and body != honest[2]):
                    wrong.append(f"{target}: {status}, not the public layer's tile")
            assert not wrong, "\n".join(wrong)
            again = _send(base, kept)  # what the front kept is the public layer's tile still
            assert (again[0], again[2]) == (200, honest[2])
            assert again[1]["x-cache"] == "HIT"


def _raw(base: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as it is (the connection closes after the answer)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in fields.items()}, body


def _request(target: str, *headers: str, version: str = "HTTP/1.1") -> bytes:
    lines = [f"GET {target} {version}", "Host: 127.0.0.1", "Connection: close", *headers, "", ""]
    return "\r\n".join(lines).encode("latin-1")


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (_request("/api-user/%%%"), 400),
        (_request("/api-user/rtile/%ZZ/8/72/110.png"), 400),
        (_request("/api-user/health%00"), 400),
        (_request("/api-user/health#top"), 400),
        (_request("/api-user/health", "Host: elsewhere"), 400),  # a second Host
        (_request("/api-user/health", "Authorization: a", "Authorization: b"), 400),
        (_request("/api-user/health", "X-Big: " + "b" * 20_000), 400),  # a header too large
        (_request("/api-user/" + "a" * 20_000), 414),
        (_request("/api-user/health", "Transfer-Encoding: gzip"), 501),
        (_request("/api-user/health", version="HTTP/2.0"), 505),
        (_request("/_front/access"), 404),  # the front's own locations are internal
    ],
    ids=[
        "%%%",
        "%ZZ",
        "%00",
        "#",
        "two Hosts",
        "two Authorization",
        "a header of 20 kB",
        "a URL of 20 kB",
        "an unknown Transfer-Encoding",
        "HTTP/2.0",
        "an internal location",
    ],
)
def test_the_fronts_own_refusals_are_json_errors_with_a_request_id(
    guarded: Guarded, request_bytes: bytes, status: int
) -> None:
    got, headers, body = _raw(guarded.base, request_bytes)
    assert got == status, body
    assert headers["content-type"] == "application/json"
    assert len(headers["x-request-id"]) == 32
    code = {404: "not-found", 500: "internal"}.get(status, "invalid-input")
    error = assert_error(json.loads(body), code)
    if b"#" in request_bytes.split(b"\r\n")[0]:
        assert "'#'" in error["message"]
    assert httpx.get(f"{guarded.base}/api-user/health").status_code == 200


def test_the_workers_do_not_run_as_root_and_read_the_cache_through_its_group(
    guarded: Guarded,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("nginx drops to another user only when started as root")
    worker = worker_user()
    assert worker is not None
    assert worker.pw_uid != 0
    run = guarded.settings.work_dir / "run"
    master = (run / "nginx.pid").read_text().strip()
    children = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:  # ended meanwhile
            continue
        fields = {name: value.strip() for name, _, value in (ln.partition(":") for ln in lines)}
        if fields.get("PPid") == master:
            children.append(fields)
    assert children, "no nginx workers"
    for fields in children:
        real, effective, *_ = (int(uid) for uid in fields["Uid"].split())
        assert real == effective == worker.pw_uid, fields["Name"]
    # the tile cache is the workers' group's (setgid: tiles made later are the group's too),
    # closed to other users
    rtile = guarded.settings.dirs.rtile
    info = rtile.stat()
    assert info.st_gid == worker.pw_gid
    assert stat.S_IMODE(info.st_mode) == 0o2750
    tile = rtile / MOSAIC_ID / "en" / str(Z) / str(X) / SUFFIXES[".png"]
    assert tile.stat().st_gid == worker.pw_gid
    # no access log; the error log keeps only critical lines (the others quote queries)
    config = (run / "nginx.conf").read_text()
    assert "access_log off;" in config
    assert re.search(r"^error_log \S+ crit;$", config, re.MULTILINE)


def test_a_tile_cache_the_workers_cannot_reach_sends_every_request_to_the_api(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    if os.geteuid() != 0:
        pytest.skip("nginx drops to another user only when started as root")
    closed = Path(tempfile.mkdtemp(prefix="mapsvc-closed-"))  # 0700, in /tmp
    mine = settings.model_copy(update={"work_dir": closed / "work"})
    try:
        with caplog.at_level(logging.WARNING, logger="mapsvc.front"):
            config = write_front_config(mine, "127.0.0.1:1").read_text()
    finally:
        shutil.rmtree(closed)
    assert f"may not pass {closed}:" in caplog.text  # the first folder they cannot pass
    # no tiles, kept answers or vector tiles from disk: the workers could not read them
    for disk in ("auth_request", "proxy_cache_path", "try_files", "@tile"):
        assert disk not in config
    assert "location / {" in config
    assert "user www-data" in config or "user nobody" in config
