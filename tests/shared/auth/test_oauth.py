"""OAuth 2.0: clients, refresh token rotation and replay, codes with PKCE."""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy import Engine, select, text

from shared.auth import oauth
from shared.auth.errors import (
    InvalidClientError,
    InvalidGrantError,
    InvalidRequestError,
    OAuthError,
    UnauthorizedClientError,
    UnsupportedGrantTypeError,
)
from shared.auth.schema import auth_codes, refresh_tokens
from shared.auth.users import User, add_user, delete_user, update_user
from shared.errors import (
    ConflictError,
    InvalidInputError,
    MapsvcError,
    NotFoundError,
    UnauthorizedError,
    error_from_code,
)

REDIRECT = "https://app.example/callback"
TTL = 600


@pytest.fixture
def user(engine: Engine) -> User:
    return add_user(engine, "alice", "password1", "operator")


@pytest.fixture
def confidential(engine: Engine) -> tuple[oauth.Client, str]:
    client, secret = oauth.add_client(engine, "web", [REDIRECT])
    assert secret is not None
    return client, secret


@pytest.fixture
def public(engine: Engine) -> oauth.Client:
    client, secret = oauth.add_client(engine, "spa", [REDIRECT], public=True)
    assert secret is None
    return client


def _verifier() -> str:
    return secrets.token_urlsafe(48)


def _grant_error(call: object, *args: object) -> InvalidGrantError:
    with pytest.raises(InvalidGrantError) as caught:
        call(*args)  # type: ignore[operator]
    assert caught.value.detail["oauth_error"] == "invalid_grant"
    return caught.value


# -- errors -------------------------------------------------------------------------------


def test_errors_carry_their_oauth_code_and_status_class() -> None:
    expected = {
        InvalidRequestError: ("invalid_request", InvalidInputError),
        InvalidClientError: ("invalid_client", UnauthorizedError),
        InvalidGrantError: ("invalid_grant", InvalidInputError),
        UnauthorizedClientError: ("unauthorized_client", InvalidInputError),
        UnsupportedGrantTypeError: ("unsupported_grant_type", InvalidInputError),
    }
    for cls, (code, base) in expected.items():
        error = cls("message")
        assert error.detail == {"oauth_error": code}
        assert isinstance(error, OAuthError)
        assert isinstance(error, base)
        rebuilt = error_from_code(cls.code, "message", error.detail)
        assert type(rebuilt) is cls
        assert rebuilt.detail == error.detail
    assert isinstance(InvalidGrantError("m"), MapsvcError)


# -- clients ------------------------------------------------------------------------------


def test_client_store(engine: Engine, confidential: tuple[oauth.Client, str]) -> None:
    client, _ = confidential
    assert client.public is False
    assert client.redirect_uris == (REDIRECT,)
    assert client.grant_types == ("authorization_code", "refresh_token", "password")
    assert oauth.get_client(engine, client.client_id) == client
    other, _ = oauth.add_client(engine, "another", [], grant_types=["password"])
    assert [c.name for c in oauth.list_clients(engine)] == ["another", "web"]
    assert [c.name for c in oauth.list_clients(engine, ord="-name")] == ["web", "another"]
    changed = oauth.update_client(engine, client.client_id, name="web2", grant_types=["password"])
    assert (changed.name, changed.grant_types, changed.redirect_uris) == (
        "web2",
        ("password",),
        (REDIRECT,),
    )
    oauth.delete_client(engine, other.client_id)
    with pytest.raises(NotFoundError):
        oauth.get_client(engine, other.client_id)
    with pytest.raises(NotFoundError):
        oauth.delete_client(engine, other.client_id)


def test_client_input_is_checked(engine: Engine) -> None:
    for uris in (
        ["/relative"],
        ["https://a.example/cb#frag"],
        ["javascript:alert(1)"],
        ["https:///x"],
        ["http://[::1/cb"],
        ["https://app.example/cb with space"],
    ):
        with pytest.raises(InvalidInputError, match="redirect URI"):
            oauth.add_client(engine, "bad", uris)
    with pytest.raises(InvalidInputError, match="grant types"):
        oauth.add_client(engine, "bad", [REDIRECT], grant_types=["client_credentials"])
    with pytest.raises(InvalidInputError, match="redirect URI"):
        oauth.add_client(engine, "bad", [], grant_types=["authorization_code"])
    assert oauth.list_clients(engine) == []


def test_check_client(
    engine: Engine, confidential: tuple[oauth.Client, str], public: oauth.Client
) -> None:
    client, secret = confidential
    assert oauth.check_client(engine, client.client_id, secret) == client
    assert oauth.check_client(engine, public.client_id, None) == public
    refusals = [
        ("no-such-client", secret),
        (client.client_id, None),  # a confidential client without its secret
        (client.client_id, secret + "x"),
        (client.client_id, ""),
        (public.client_id, "anything"),  # a public client has no secret
    ]
    for client_id, given in refusals:
        with pytest.raises(InvalidClientError) as caught:
            oauth.check_client(engine, client_id, given)
        assert caught.value.detail == {"oauth_error": "invalid_client"}


def test_reset_secret(
    engine: Engine, confidential: tuple[oauth.Client, str], public: oauth.Client
) -> None:
    client, old = confidential
    new = oauth.reset_client_secret(engine, client.client_id)
    assert oauth.check_client(engine, client.client_id, new) == client
    with pytest.raises(InvalidClientError):
        oauth.check_client(engine, client.client_id, old)
    with pytest.raises(ConflictError):
        oauth.reset_client_secret(engine, public.client_id)


def test_check_grant_type(engine: Engine) -> None:
    client, _ = oauth.add_client(engine, "pw", [], grant_types=["password"])
    oauth.check_grant_type(client, "password")
    with pytest.raises(UnauthorizedClientError):
        oauth.check_grant_type(client, "refresh_token")
    with pytest.raises(UnsupportedGrantTypeError):
        oauth.check_grant_type(client, "client_credentials")


# -- refresh tokens -----------------------------------------------------------------------


def test_refresh_rotates(engine: Engine, user: User, public: oauth.Client) -> None:
    first = oauth.issue_refresh_token(engine, user.id, public.client_id, TTL)
    same_user, second = oauth.rotate_refresh_token(engine, first, public.client_id, TTL)
    assert same_user == user
    assert second != first
    _, third = oauth.rotate_refresh_token(engine, second, public.client_id, TTL)
    with engine.connect() as conn:
        rows = conn.execute(select(refresh_tokens.c.family_id, refresh_tokens.c.used_at)).all()
    assert len({row.family_id for row in rows}) == 1  # one family
    assert sorted(row.used_at is None for row in rows) == [False, False, True]


def test_replayed_refresh_token_kills_the_family(
    engine: Engine, user: User, public: oauth.Client
) -> None:
    first = oauth.issue_refresh_token(engine, user.id, public.client_id, TTL)
    other_login = oauth.issue_refresh_token(engine, user.id, public.client_id, TTL)
    _, second = oauth.rotate_refresh_token(engine, first, public.client_id, TTL)
    error = _grant_error(oauth.rotate_refresh_token, engine, first, public.client_id, TTL)
    assert "revoked" in error.message
    # the thief's or the client's newer token is dead too
    _grant_error(oauth.rotate_refresh_token, engine, second, public.client_id, TTL)
    # another family (another login) lives on
    assert oauth.rotate_refresh_token(engine, other_login, public.client_id, TTL)[0] == user


def test_refresh_refusals(
    engine: Engine, user: User, public: oauth.Client, confidential: tuple[oauth.Client, str]
) -> None:
    _grant_error(oauth.rotate_refresh_token, engine, "unknown-token", public.client_id, TTL)
    token = oauth.issue_refresh_token(engine, user.id, public.client_id, TTL)
    with engine.begin() as conn:
        conn.execute(refresh_tokens.update().values(expires_at=text("now() - interval '1 s'")))
    assert (
        "expired"
        in _grant_error(oauth.rotate_refresh_token, engine, token, public.client_id, TTL).message
    )
    token = oauth.issue_refresh_token(engine, user.id, public.client_id, TTL)
    other = confidential[0].client_id
    assert (
        "another client"
        in _grant_error(oauth.rotate_refresh_token, engine, token, other, TTL).message
    )
    _grant_error(oauth.rotate_refresh_token, engine, token, public.client_id, TTL)  # revoked


def test_disabled_user_cannot_refresh(engine: Engine, user: User, public: oauth.Client) -> None:
    token = oauth.issue_refresh_token(engine, user.id, public.client_id, TTL)
    update_user(engine, user.id, disabled=True)
    assert (
        "disabled"
        in _grant_error(oauth.rotate_refresh_token, engine, token, public.client_id, TTL).message
    )


def test_revoke_refresh_token(engine: Engine, user: User, public: oauth.Client) -> None:
    token = oauth.issue_refresh_token(engine, user.id, public.client_id, TTL)
    _, newer = oauth.rotate_refresh_token(engine, token, public.client_id, TTL)
    assert oauth.revoke_refresh_token(engine, newer, "another-client") is False
    _, newest = oauth.rotate_refresh_token(engine, newer, public.client_id, TTL)  # not revoked
    assert oauth.revoke_refresh_token(engine, token, public.client_id) is True  # any of the family
    with engine.connect() as conn:
        assert conn.execute(select(refresh_tokens.c.revoked_at.is_(None))).scalars().all() == [
            False,
            False,
            False,
        ]
    _grant_error(oauth.rotate_refresh_token, engine, newest, public.client_id, TTL)
    assert oauth.revoke_refresh_token(engine, "unknown") is False
    with pytest.raises(NotFoundError):
        oauth.issue_refresh_token(engine, user.id + 99, public.client_id, TTL)


# -- authorization codes ------------------------------------------------------------------


def test_code_with_pkce(engine: Engine, user: User, public: oauth.Client) -> None:
    verifier = _verifier()
    challenge = oauth.pkce_challenge(verifier)
    code = oauth.issue_code(engine, public.client_id, user.id, REDIRECT, challenge, "S256", 60)
    assert oauth.redeem_code(engine, code, public.client_id, REDIRECT, verifier) == user


def test_pkce_challenge_is_rfc7636s() -> None:
    # RFC 7636 appendix B
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert oauth.pkce_challenge(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def test_reused_code_is_refused_and_revokes_its_tokens(
    engine: Engine, user: User, public: oauth.Client
) -> None:
    verifier = _verifier()
    challenge = oauth.pkce_challenge(verifier)
    code = oauth.issue_code(engine, public.client_id, user.id, REDIRECT, challenge, "S256", 60)
    got, refresh = oauth.exchange_code(engine, code, public.client_id, REDIRECT, verifier, TTL)
    assert got == user
    error = _grant_error(oauth.redeem_code, engine, code, public.client_id, REDIRECT, verifier)
    assert "already used" in error.message
    _grant_error(oauth.rotate_refresh_token, engine, refresh, public.client_id, TTL)
    with engine.connect() as conn:
        revoked = conn.execute(select(refresh_tokens.c.revoked_at)).scalar_one()
    assert revoked is not None


def test_code_is_spent_by_a_failed_attempt(
    engine: Engine, user: User, public: oauth.Client
) -> None:
    verifier = _verifier()
    challenge = oauth.pkce_challenge(verifier)
    code = oauth.issue_code(engine, public.client_id, user.id, REDIRECT, challenge, "S256", 60)
    _grant_error(oauth.redeem_code, engine, code, public.client_id, REDIRECT, _verifier())
    _grant_error(oauth.redeem_code, engine, code, public.client_id, REDIRECT, verifier)


def test_code_refusals(
    engine: Engine, user: User, public: oauth.Client, confidential: tuple[oauth.Client, str]
) -> None:
    other = confidential[0]
    oauth.update_client(engine, other.client_id, redirect_uris=[REDIRECT, "https://app.example/2"])
    verifier = _verifier()
    challenge = oauth.pkce_challenge(verifier)

    def refused(
        client_id: str,
        redirect: str,
        given: str | None,
        *,
        ttl: int = 60,
        pkce: bool = True,
        issuer: str | None = None,
    ) -> str:
        code = oauth.issue_code(
            engine,
            issuer or client_id,
            user.id,
            REDIRECT,
            challenge if pkce else None,
            "S256" if pkce else None,
            ttl,
        )
        return _grant_error(oauth.redeem_code, engine, code, client_id, redirect, given).message

    assert "redirect_uri" in refused(public.client_id, "https://app.example/callback/", verifier)
    assert "redirect_uri" in refused(public.client_id, "https://app.example/2", verifier)
    assert "does not match" in refused(public.client_id, REDIRECT, _verifier())
    assert "malformed" in refused(public.client_id, REDIRECT, None)
    assert "malformed" in refused(public.client_id, REDIRECT, "short")
    assert "malformed" in refused(public.client_id, REDIRECT, verifier + "\u00e9")
    assert "another client" in refused(other.client_id, REDIRECT, verifier, issuer=public.client_id)
    assert "no challenge" in refused(other.client_id, REDIRECT, verifier, pkce=False)
    assert (
        "unknown"
        in _grant_error(
            oauth.redeem_code, engine, "no-such-code", public.client_id, REDIRECT, verifier
        ).message
    )
    code = oauth.issue_code(engine, public.client_id, user.id, REDIRECT, challenge, "S256", 60)
    with engine.begin() as conn:
        conn.execute(auth_codes.update().values(expires_at=text("now() - interval '1 s'")))
    assert (
        "expired"
        in _grant_error(
            oauth.redeem_code, engine, code, public.client_id, REDIRECT, verifier
        ).message
    )


def test_confidential_client_may_skip_pkce(
    engine: Engine, user: User, confidential: tuple[oauth.Client, str]
) -> None:
    client = confidential[0]
    code = oauth.issue_code(engine, client.client_id, user.id, REDIRECT, None, None, 60)
    assert oauth.redeem_code(engine, code, client.client_id, REDIRECT, None) == user


def test_disabled_user_cannot_redeem(
    engine: Engine, user: User, confidential: tuple[oauth.Client, str]
) -> None:
    client = confidential[0]
    code = oauth.issue_code(engine, client.client_id, user.id, REDIRECT, None, None, 60)
    update_user(engine, user.id, disabled=True)
    assert (
        "disabled"
        in _grant_error(oauth.redeem_code, engine, code, client.client_id, REDIRECT, None).message
    )


def test_issue_code_refusals(
    engine: Engine, user: User, public: oauth.Client, confidential: tuple[oauth.Client, str]
) -> None:
    challenge = oauth.pkce_challenge(_verifier())
    cases = [
        ((public.client_id, user.id, REDIRECT, None, None), InvalidRequestError, "PKCE"),
        ((public.client_id, user.id, REDIRECT, challenge, "plain"), InvalidRequestError, "S256"),
        ((public.client_id, user.id, REDIRECT, challenge, None), InvalidRequestError, "S256"),
        ((public.client_id, user.id, REDIRECT, "too-short", "S256"), InvalidRequestError, "BASE64"),
        (
            (confidential[0].client_id, user.id, REDIRECT, None, "S256"),
            InvalidRequestError,
            "without",
        ),
        (
            (public.client_id, user.id, "https://evil.example/cb", challenge, "S256"),
            InvalidRequestError,
            "redirect_uri",
        ),
        (("no-such-client", user.id, REDIRECT, challenge, "S256"), InvalidClientError, "unknown"),
    ]
    for args, error, match in cases:
        with pytest.raises(error, match=match) as caught:
            oauth.issue_code(engine, *args, 60)
        assert isinstance(caught.value, OAuthError)
    assert caught.value.detail["oauth_error"] == "invalid_client"
    password_only, _ = oauth.add_client(engine, "pw", [REDIRECT], grant_types=["password"])
    with pytest.raises(UnauthorizedClientError):
        oauth.issue_code(engine, password_only.client_id, user.id, REDIRECT, None, None, 60)
    with pytest.raises(NotFoundError):
        oauth.issue_code(engine, public.client_id, user.id + 99, REDIRECT, challenge, "S256", 60)
    with engine.connect() as conn:
        assert conn.execute(select(auth_codes)).all() == []


def test_purge_expired(engine: Engine, user: User, public: oauth.Client) -> None:
    challenge = oauth.pkce_challenge(_verifier())
    oauth.issue_code(engine, public.client_id, user.id, REDIRECT, challenge, "S256", 60)
    oauth.issue_refresh_token(engine, user.id, public.client_id, TTL)
    oauth.issue_refresh_token(engine, user.id, public.client_id, TTL)
    assert oauth.purge_expired(engine) == 0
    with engine.begin() as conn:
        conn.execute(auth_codes.update().values(expires_at=text("now() - interval '2 days'")))
        conn.execute(
            refresh_tokens.update()
            .where(refresh_tokens.c.id == select(refresh_tokens.c.id).limit(1).scalar_subquery())
            .values(expires_at=text("now() - interval '2 days'"))
        )
    assert oauth.purge_expired(engine) == 2
    with engine.connect() as conn:
        assert len(conn.execute(select(refresh_tokens)).all()) == 1


def test_deleting_a_user_or_client_removes_their_grants(
    engine: Engine, user: User, public: oauth.Client
) -> None:
    token = oauth.issue_refresh_token(engine, user.id, public.client_id, TTL)
    oauth.delete_client(engine, public.client_id)
    _grant_error(oauth.rotate_refresh_token, engine, token, public.client_id, TTL)
    delete_user(engine, user.id)
    with engine.connect() as conn:
        assert conn.execute(select(refresh_tokens)).all() == []
