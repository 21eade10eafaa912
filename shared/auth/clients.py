"""OAuth 2.0 clients (RFC 6749 section 2): confidential ones with a secret, public ones without.

A confidential client's secret is shown once, when made (or reset), and kept as its digest. A
public client (a browser or mobile app, which cannot keep a secret) has none and must use
PKCE. Redirect URIs are compared exactly.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Connection, Engine, Row, select

from shared.auth.common import check_name, found, ordered
from shared.auth.errors import (
    InvalidClientError,
    UnauthorizedClientError,
    UnsupportedGrantTypeError,
)
from shared.auth.hashing import digest
from shared.auth.schema import oauth_clients
from shared.errors import ConflictError, InvalidInputError, NotFoundError

__all__ = [
    "GRANT_TYPES",
    "Client",
    "add_client",
    "check_client",
    "check_grant_type",
    "client_of",
    "client_row",
    "delete_client",
    "get_client",
    "list_clients",
    "reset_client_secret",
    "update_client",
]

#: the grant types the service supports
GRANT_TYPES = ("authorization_code", "refresh_token", "password")
_BAD_SCHEMES = frozenset({"javascript", "data", "vbscript", "file"})

_ORDERS = {
    "name": oauth_clients.c.name,
    "created": oauth_clients.c.created,
    "client_id": oauth_clients.c.client_id,
}


@dataclass(frozen=True)
class Client:
    """An OAuth 2.0 client as listed: never its secret nor the secret's digest."""

    client_id: str
    name: str
    public: bool
    redirect_uris: tuple[str, ...]
    grant_types: tuple[str, ...]
    created: datetime


def client_of(row: Row[Any]) -> Client:
    """The `Client` of a row of ``oauth_clients``."""
    return Client(
        client_id=row.client_id,
        name=row.name,
        public=row.secret_hash is None,
        redirect_uris=tuple(row.redirect_uris),
        grant_types=tuple(row.grant_types),
        created=row.created,
    )


def _redirect_uri_ok(uri: object) -> bool:
    """Whether ``uri`` is an absolute URI without fragment of a scheme that may be redirected to."""
    if not isinstance(uri, str) or not uri.isprintable() or " " in uri or "#" in uri:
        return False
    try:
        parts = urlsplit(uri)
        host = parts.hostname
    except ValueError:  # an unclosed IPv6 bracket, a bad port
        return False
    scheme = parts.scheme.lower()
    if not scheme or scheme in _BAD_SCHEMES:
        return False
    return bool(host) or scheme not in ("http", "https")


def _check_redirect_uris(uris: Iterable[str]) -> list[str]:
    """Absolute URIs without a fragment (RFC 6749 section 3.1.2), compared exactly later."""
    if isinstance(uris, str):
        raise InvalidInputError("redirect_uris must be a list of URIs, not one string")
    checked: list[str] = []
    for uri in uris:
        if not _redirect_uri_ok(uri):
            raise InvalidInputError(f"not an absolute redirect URI without fragment: {uri!r}")
        if uri not in checked:
            checked.append(uri)
    return checked


def _check_grant_types(grant_types: Iterable[str]) -> list[str]:
    if isinstance(grant_types, str):
        raise InvalidInputError("grant_types must be a list, not one string")
    checked = list(dict.fromkeys(grant_types))
    unknown = [grant for grant in checked if grant not in GRANT_TYPES]
    if unknown or not checked:
        raise InvalidInputError(
            f"grant types are some of {', '.join(GRANT_TYPES)}", grant_types=checked
        )
    return checked


def _check_client_fields(redirect_uris: list[str], grant_types: list[str]) -> None:
    if "authorization_code" in grant_types and not redirect_uris:
        raise InvalidInputError("a client of the authorization_code grant needs a redirect URI")


def add_client(
    engine: Engine,
    name: str,
    redirect_uris: Iterable[str],
    *,
    public: bool = False,
    grant_types: Iterable[str] = ("authorization_code", "refresh_token", "password"),
) -> tuple[Client, str | None]:
    """Register an OAuth 2.0 client under a random ``client_id``.

    Args:
        engine: the database.
        name: what the client is.
        redirect_uris: where codes may be sent: absolute, no fragment, matched exactly.
        public: a client that cannot keep a secret (a browser or mobile app): it gets none
            and must use PKCE.
        grant_types: the grants it may use, among `GRANT_TYPES`.

    Returns:
        The client, and its secret (None for a public client): shown here only.

    Raises:
        InvalidInputError: a bad name, redirect URI or grant type.
    """
    uris = _check_redirect_uris(redirect_uris)
    grants = _check_grant_types(grant_types)
    _check_client_fields(uris, grants)
    secret = None if public else secrets.token_urlsafe(32)
    values = {
        "client_id": secrets.token_urlsafe(16),
        "name": check_name(name, "a client's name"),
        "secret_hash": None if secret is None else digest(secret),
        "redirect_uris": uris,
        "grant_types": grants,
    }
    with engine.begin() as conn:
        row = conn.execute(oauth_clients.insert().values(values).returning(oauth_clients)).one()
    return client_of(row), secret


def list_clients(engine: Engine, *, ord: str = "name") -> list[Client]:
    """The clients, sorted by ``ord`` (name, created, client_id; ``-``: descending)."""
    query = ordered(select(oauth_clients), ord, _ORDERS).order_by(oauth_clients.c.client_id)
    with engine.connect() as conn:
        return [client_of(row) for row in conn.execute(query)]


def client_row(conn: Connection, client_id: str) -> Row[Any] | None:
    """The row of client ``client_id``, if there is one."""
    query = select(oauth_clients).where(oauth_clients.c.client_id == client_id)
    return conn.execute(query).first()


def get_client(engine: Engine, client_id: str) -> Client:
    """The client ``client_id``; NotFoundError if there is none."""
    with engine.connect() as conn:
        row = client_row(conn, client_id)
    if row is None:
        raise NotFoundError(f"no OAuth client {client_id!r}", client_id=client_id)
    return client_of(row)


def update_client(
    engine: Engine,
    client_id: str,
    *,
    name: str | None = None,
    redirect_uris: Iterable[str] | None = None,
    grant_types: Iterable[str] | None = None,
) -> Client:
    """Change what is given of client ``client_id``.

    Raises:
        NotFoundError: no such client.
        InvalidInputError: a bad name, redirect URI or grant type.
    """
    current = get_client(engine, client_id)
    uris = _check_redirect_uris(current.redirect_uris if redirect_uris is None else redirect_uris)
    grants = _check_grant_types(current.grant_types if grant_types is None else grant_types)
    _check_client_fields(uris, grants)
    values: dict[str, Any] = {"redirect_uris": uris, "grant_types": grants}
    if name is not None:
        values["name"] = check_name(name, "a client's name")
    return _change_client(engine, client_id, values)


def _change_client(engine: Engine, client_id: str, values: dict[str, Any]) -> Client:
    query = (
        oauth_clients.update()
        .where(oauth_clients.c.client_id == client_id)
        .values(values)
        .returning(oauth_clients)
    )
    missing = NotFoundError(f"no OAuth client {client_id!r}", client_id=client_id)
    return client_of(found(engine, query, missing))


def reset_client_secret(engine: Engine, client_id: str) -> str:
    """A new secret for confidential client ``client_id`` (the old one stops working).

    Raises:
        NotFoundError: no such client.
        ConflictError: the client is public: it has no secret.
    """
    if get_client(engine, client_id).public:
        raise ConflictError("a public client has no secret", client_id=client_id)
    secret = secrets.token_urlsafe(32)
    _change_client(engine, client_id, {"secret_hash": digest(secret)})
    return secret


def delete_client(engine: Engine, client_id: str) -> None:
    """Delete client ``client_id`` with its codes and refresh tokens; NotFoundError if none."""
    query = oauth_clients.delete().where(oauth_clients.c.client_id == client_id)
    with engine.begin() as conn:
        deleted = conn.execute(query).rowcount
    if not deleted:
        raise NotFoundError(f"no OAuth client {client_id!r}", client_id=client_id)


def check_client(engine: Engine, client_id: str, secret: str | None) -> Client:
    """The client that authenticates with ``client_id`` and ``secret``.

    A confidential client must give its secret; a public client must give none (it has
    none: any secret is wrong).

    Raises:
        InvalidClientError: an unknown client, a missing or wrong secret, or a secret given
            by a public client.
    """
    with engine.connect() as conn:
        row = client_row(conn, client_id)
    if row is None or not _secret_matches(row.secret_hash, secret):
        raise InvalidClientError("unknown client or wrong client credentials")
    return client_of(row)


def _secret_matches(secret_hash: str | None, secret: str | None) -> bool:
    """Whether ``secret`` is the client's (None for a public client, ``secret_hash`` None)."""
    if secret_hash is None or secret is None:
        return secret_hash is None and secret is None
    return hmac.compare_digest(digest(secret), secret_hash)


def check_grant_type(client: Client, grant_type: str) -> None:
    """Refuse ``grant_type`` unless the service supports it and ``client`` may use it.

    Raises:
        UnsupportedGrantTypeError: a grant type the service does not support.
        UnauthorizedClientError: one the client may not use.
    """
    if grant_type not in GRANT_TYPES:
        raise UnsupportedGrantTypeError(f"unsupported grant type {grant_type!r}")
    if grant_type not in client.grant_types:
        raise UnauthorizedClientError(f"this client may not use the {grant_type} grant")
