"""OAuth 2.0 (RFC 6749) grants: authorization codes with PKCE (RFC 7636), refresh tokens.

The clients are in `shared.auth.clients`, whose functions this module also offers. Codes are
single-use: a code shown twice is refused and the refresh tokens it gave are revoked (RFC 6749
section 4.1.2). Refresh tokens rotate on every use; one shown again after its use revokes its
whole family, the chain of tokens that descends from one login (RFC 9700 section 4.14.2).
Failures raise the errors of `shared.auth.errors`, whose ``oauth_error`` detail is the RFC's
error code.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Row, select
from sqlalchemy.exc import IntegrityError

from shared.auth.clients import (
    GRANT_TYPES,
    Client,
    add_client,
    check_client,
    check_grant_type,
    client_of,
    client_row,
    delete_client,
    get_client,
    list_clients,
    reset_client_secret,
    update_client,
)
from shared.auth.common import db_now
from shared.auth.errors import InvalidClientError, InvalidGrantError, InvalidRequestError
from shared.auth.hashing import digest
from shared.auth.schema import auth_codes, refresh_tokens, users
from shared.auth.users import User, user_of
from shared.errors import NotFoundError

__all__ = [
    "GRANT_TYPES",
    "PKCE_METHOD",
    "Client",
    "add_client",
    "check_client",
    "check_grant_type",
    "delete_client",
    "exchange_code",
    "get_client",
    "issue_code",
    "issue_refresh_token",
    "list_clients",
    "pkce_challenge",
    "purge_expired",
    "redeem_code",
    "reset_client_secret",
    "revoke_refresh_token",
    "rotate_refresh_token",
    "update_client",
]

#: the one PKCE method accepted (``plain`` is not)
PKCE_METHOD = "S256"
#: RFC 7636 section 4.1: 43 to 128 unreserved characters
_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")
#: BASE64URL of a SHA-256, without padding
_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")


# -- refresh tokens ----------------------------------------------------------------------


def _issue_refresh(
    conn: Connection, user_id: int, client_id: str, ttl_s: int, family_id: str, now: datetime
) -> str:
    token = secrets.token_urlsafe(32)
    conn.execute(
        refresh_tokens.insert().values(
            id=str(uuid.uuid4()),
            token_hash=digest(token),
            family_id=family_id,
            user_id=user_id,
            client_id=client_id,
            expires_at=now + timedelta(seconds=ttl_s),
        )
    )
    return token


def _revoke_family(conn: Connection, family_id: str, now: datetime) -> None:
    conn.execute(
        refresh_tokens.update()
        .where(refresh_tokens.c.family_id == family_id, refresh_tokens.c.revoked_at.is_(None))
        .values(revoked_at=now)
    )


def issue_refresh_token(
    engine: Engine, user_id: int, client_id: str, ttl_s: int, family_id: str | None = None
) -> str:
    """A new refresh token of ``user_id`` for ``client_id``, valid ``ttl_s`` seconds.

    Args:
        engine: the database.
        user_id: whose token it is.
        client_id: the client it is given to; only that client may use it.
        ttl_s: its lifetime (``settings.auth.refresh_ttl_s``).
        family_id: the family it joins; None: a new family (a new login).

    Returns:
        The token: stored only as its digest.

    Raises:
        NotFoundError: no such user or client.
    """
    try:
        with engine.begin() as conn:
            now = db_now(conn)
            family = family_id or str(uuid.uuid4())
            return _issue_refresh(conn, user_id, client_id, ttl_s, family, now)
    except IntegrityError as exc:
        raise NotFoundError("no such user or OAuth client", user_id=user_id) from exc


def rotate_refresh_token(
    engine: Engine, token: str, client_id: str, ttl_s: int
) -> tuple[User, str]:
    """Use refresh token ``token``: it is spent, and a new one of its family is returned.

    Args:
        engine: the database.
        token: the refresh token shown.
        client_id: the client that shows it (authenticated already).
        ttl_s: the new token's lifetime.

    Returns:
        The token's user, and the new refresh token.

    Raises:
        InvalidGrantError: an unknown, expired, revoked or spent token (a spent or revoked
            one also revokes its whole family: it was stolen, or the thief used it first),
            a token of another client (it leaked: its family is revoked), or a disabled user.
    """
    failure: str | None = "unknown refresh token"
    with engine.begin() as conn:
        now = db_now(conn)
        query = select(refresh_tokens).where(refresh_tokens.c.token_hash == digest(token))
        row = conn.execute(query.with_for_update()).first()
        if row is not None:
            user = conn.execute(users.select().where(users.c.id == row.user_id)).one()
            failure, revoke = _refresh_failure(row, user, client_id, now)
            if revoke:
                _revoke_family(conn, row.family_id, now)
            elif failure is None:
                spent = refresh_tokens.update().where(refresh_tokens.c.id == row.id)
                conn.execute(spent.values(used_at=now))
                family = str(row.family_id)
                return user_of(user), _issue_refresh(conn, user.id, client_id, ttl_s, family, now)
    raise InvalidGrantError(failure or "invalid refresh token")


def _refresh_failure(
    row: Row[Any], user: Row[Any], client_id: str, now: datetime
) -> tuple[str | None, bool]:
    """Why a refresh token is refused (None: it is not), and whether to revoke its family."""
    if row.used_at is not None or row.revoked_at is not None:
        return "refresh token already used or revoked: its family is revoked", True
    if row.client_id != client_id:
        return "refresh token of another client: its family is revoked", True
    if row.expires_at <= now:
        return "expired refresh token", False
    if user.disabled:
        return "the user is disabled: the token's family is revoked", True
    return None, False


def revoke_refresh_token(engine: Engine, token: str, client_id: str | None = None) -> bool:
    """Revoke refresh token ``token`` and its whole family (a logout, RFC 7009).

    Args:
        engine: the database.
        token: the refresh token shown.
        client_id: the client that asks; a token of another client is left alone.

    Returns:
        Whether a token was revoked (RFC 7009 answers the same either way).
    """
    query = select(refresh_tokens.c.family_id).where(refresh_tokens.c.token_hash == digest(token))
    if client_id is not None:
        query = query.where(refresh_tokens.c.client_id == client_id)
    with engine.begin() as conn:
        family_id = conn.execute(query).scalar_one_or_none()
        if family_id is None:
            return False
        _revoke_family(conn, family_id, db_now(conn))
    return True


# -- authorization codes ------------------------------------------------------------------


def pkce_challenge(verifier: str) -> str:
    """The S256 challenge of ``verifier``: BASE64URL(SHA256(verifier)) without padding."""
    hashed = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(hashed).rstrip(b"=").decode("ascii")


def issue_code(
    engine: Engine,
    client_id: str,
    user_id: int,
    redirect_uri: str,
    code_challenge: str | None,
    code_challenge_method: str | None,
    ttl_s: int,
) -> str:
    """An authorization code that ``client_id`` can exchange once for ``user_id``'s tokens.

    Args:
        engine: the database.
        client_id: the client that asked.
        user_id: the user who logged in and agreed.
        redirect_uri: where the code goes: one of the client's, exactly.
        code_challenge: the PKCE challenge; a public client must give one.
        code_challenge_method: ``S256`` (the only method accepted) with a challenge.
        ttl_s: the code's lifetime (``settings.auth.code_ttl_s``).

    Returns:
        The code: stored only as its digest.

    Raises:
        InvalidClientError: an unknown client.
        UnauthorizedClientError: the client may not use the authorization_code grant.
        InvalidRequestError: a redirect URI that is not the client's, or a missing or bad
            PKCE challenge.
        NotFoundError: no such user.
    """
    with engine.connect() as conn:
        row = client_row(conn, client_id)
    if row is None:
        raise InvalidClientError("unknown client")
    client = client_of(row)
    check_grant_type(client, "authorization_code")
    if redirect_uri not in client.redirect_uris:
        raise InvalidRequestError("redirect_uri is not one of the client's")
    _check_challenge(client, code_challenge, code_challenge_method)
    code = secrets.token_urlsafe(32)
    try:
        with engine.begin() as conn:
            now = db_now(conn)
            _purge(conn, now, timedelta(days=1))
            conn.execute(
                auth_codes.insert().values(
                    code_hash=digest(code),
                    family_id=str(uuid.uuid4()),
                    client_id=client_id,
                    user_id=user_id,
                    redirect_uri=redirect_uri,
                    code_challenge=code_challenge,
                    code_challenge_method=code_challenge_method if code_challenge else None,
                    expires_at=now + timedelta(seconds=ttl_s),
                )
            )
    except IntegrityError as exc:
        raise NotFoundError(f"no user {user_id}", user_id=user_id) from exc
    return code


def _check_challenge(client: Client, challenge: str | None, method: str | None) -> None:
    if challenge is None:
        if client.public:
            raise InvalidRequestError("a public client must send a PKCE code_challenge (S256)")
        if method is not None:
            raise InvalidRequestError("code_challenge_method without code_challenge")
        return
    if method != PKCE_METHOD:
        raise InvalidRequestError("code_challenge_method must be S256")
    if not _CHALLENGE.fullmatch(challenge):
        raise InvalidRequestError("code_challenge is not a BASE64URL SHA-256")


def redeem_code(
    engine: Engine, code: str, client_id: str, redirect_uri: str, code_verifier: str | None
) -> User:
    """Spend authorization code ``code``: the user it was issued for.

    A code is spent by the first attempt, good or bad; showing it again revokes the refresh
    tokens it gave (see `exchange_code`).

    Args:
        engine: the database.
        code: the code shown.
        client_id: the client that shows it (authenticated already).
        redirect_uri: the redirect URI of the authorization request, exactly.
        code_verifier: the PKCE verifier, if the request had a challenge (and only then).

    Raises:
        InvalidGrantError: an unknown, spent or expired code, another client's, another
            redirect URI, a missing or wrong PKCE verifier, or a disabled user.
    """
    return _redeem(engine, code, client_id, redirect_uri, code_verifier, None)[0]


def exchange_code(
    engine: Engine,
    code: str,
    client_id: str,
    redirect_uri: str,
    code_verifier: str | None,
    refresh_ttl_s: int,
) -> tuple[User, str]:
    """`redeem_code`, and a refresh token of a family tied to the code, in one transaction.

    Showing the code again revokes that family (RFC 6749 section 4.1.2).

    Returns:
        The user and a new refresh token.

    Raises:
        InvalidGrantError: as for `redeem_code`.
    """
    user, token = _redeem(engine, code, client_id, redirect_uri, code_verifier, refresh_ttl_s)
    assert token is not None
    return user, token


def _redeem(
    engine: Engine,
    code: str,
    client_id: str,
    redirect_uri: str,
    verifier: str | None,
    refresh_ttl_s: int | None,
) -> tuple[User, str | None]:
    code_hash = digest(code)
    failure: str | None
    with engine.begin() as conn:
        now = db_now(conn)
        spend = (
            auth_codes.update()
            .where(auth_codes.c.code_hash == code_hash, auth_codes.c.used_at.is_(None))
            .values(used_at=now)
            .returning(auth_codes)
        )
        row = conn.execute(spend).first()
        if row is None:
            query = select(auth_codes.c.family_id).where(auth_codes.c.code_hash == code_hash)
            family_id = conn.execute(query).scalar_one_or_none()
            if family_id is not None:
                _revoke_family(conn, family_id, now)
            failure = "authorization code already used" if family_id else "unknown code"
        else:
            user = conn.execute(users.select().where(users.c.id == row.user_id)).one()
            failure = _code_failure(row, user, client_id, redirect_uri, verifier, now)
            if failure is None:
                token = None
                if refresh_ttl_s is not None:
                    family = str(row.family_id)
                    token = _issue_refresh(conn, row.user_id, client_id, refresh_ttl_s, family, now)
                return user_of(user), token
    raise InvalidGrantError(failure)


def _code_failure(
    row: Row[Any],
    user: Row[Any],
    client_id: str,
    redirect_uri: str,
    verifier: str | None,
    now: datetime,
) -> str | None:
    """Why a code that was not spent yet is refused; None: it is not."""
    if row.expires_at <= now:
        return "expired authorization code"
    if row.client_id != client_id:
        return "authorization code of another client"
    if row.redirect_uri != redirect_uri:
        return "redirect_uri differs from the authorization request's"
    if row.code_challenge is None:
        if verifier is not None:
            return "code_verifier given, but the authorization request had no challenge"
    elif verifier is None or not _VERIFIER.fullmatch(verifier):
        return "missing or malformed code_verifier"
    elif not hmac.compare_digest(pkce_challenge(verifier), row.code_challenge):
        return "code_verifier does not match the code_challenge"
    if user.disabled:
        return "the user is disabled"
    return None


def _purge(conn: Connection, now: datetime, keep: timedelta) -> int:
    gone = 0
    for table in (auth_codes, refresh_tokens):
        gone += conn.execute(table.delete().where(table.c.expires_at < now - keep)).rowcount
    return gone


def purge_expired(engine: Engine, *, keep_s: int = 86400) -> int:
    """Delete the codes and refresh tokens expired for more than ``keep_s``; how many.

    `issue_code` does it too, with the default. Spent ones are kept until then so that a
    replay is still recognised (and revokes its family) while it could matter.
    """
    with engine.begin() as conn:
        return _purge(conn, db_now(conn), timedelta(seconds=keep_s))
