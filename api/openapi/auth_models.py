"""The bodies of the authentication and admin routes: what they take and what they answer.

The ``*In`` and ``*Patch`` models are the admin API's request bodies (:mod:`api.routes.admin`,
read by the endpoint's wrapper; unknown fields are refused). The OAuth 2.0 and login models
(:class:`TokenForm`, :class:`AuthorizeRequest`, :class:`AuthorizeForm`, :class:`Login`) take
exactly what :mod:`api.routes.auth` accepts; a value RFC 6749 answers in its own way (another
``response_type``, ``decision`` or PKCE method) is documented as the one expected and left to
the handler, which answers it as the RFC says.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, RootModel, WithJsonSchema

from api.openapi.models import Answer
from shared.auth.principal import Role

__all__ = [
    "ApiKey",
    "ApiKeyCreated",
    "AuthorizeForm",
    "AuthorizeRequest",
    "ClientIn",
    "CLIENT_ID_PATTERN",
    "ClientPatch",
    "CodeGrant",
    "GrantType",
    "KeyIn",
    "KeyPatch",
    "MAX_FIELD",
    "Login",
    "LoginAnswer",
    "OAuthClient",
    "OAuthClientCreated",
    "OAuthError",
    "PasswordGrant",
    "RefreshGrant",
    "ResponseType",
    "Token",
    "TokenForm",
    "User",
    "UserIn",
    "UserPatch",
]

GrantType = Literal["authorization_code", "refresh_token", "password"]
_ALL_GRANTS: list[GrantType] = ["authorization_code", "refresh_token", "password"]
_LAYERS = "Layer ids the holder may see; null: every layer"
#: the longest field of a login, token or consent form
MAX_FIELD = 4096
#: a client id: made by the service, URL-safe base64 (``secrets.token_urlsafe``)
CLIENT_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
#: a text PostgreSQL can keep or look up: no NUL character
_DB_TEXT = r"^[^\x00]*$"
#: layer ids, as PostgreSQL keeps them
_Layers = list[Annotated[str, Field(pattern=_DB_TEXT)]]
#: the longest text of an authorization request, whose fields are a URL's query: all of them
#: at their longest, percent-encoded, stay well within what a server reads of a request line
#: (64 KiB for uvicorn)
_QUERY_FIELD = 500


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserIn(_In):
    """A new user."""

    login: str = Field(min_length=1, max_length=128)
    password: str = Field(min_length=8, max_length=1024)
    role: Role = "reader"
    layers: _Layers | None = Field(default=None, description=_LAYERS)


class UserPatch(_In):
    """Changes to a user: only the fields given."""

    password: str | None = Field(default=None, min_length=8, max_length=1024)
    role: Role | None = None
    layers: _Layers | None = Field(default=None, description=_LAYERS)
    disabled: bool | None = None


class KeyIn(_In):
    """A new API key."""

    name: str = Field(min_length=1, max_length=128)
    role: Role = "reader"
    layers: _Layers | None = Field(default=None, description=_LAYERS)
    expires_at: datetime | None = Field(default=None, description="ISO 8601; null: never")
    user_id: int | None = Field(default=None, description="The user the key acts for")


class KeyPatch(_In):
    """Changes to an API key: only the fields given."""

    name: str | None = Field(default=None, min_length=1, max_length=128)
    role: Role | None = None
    layers: _Layers | None = Field(default=None, description=_LAYERS)
    expires_at: datetime | None = None


class ClientIn(_In):
    """A new OAuth 2.0 client; a public client (no secret) must use PKCE (S256)."""

    name: str = Field(min_length=1, max_length=128)
    redirect_uris: list[str] = Field(default_factory=list, max_length=16)
    public: bool = False
    grant_types: list[GrantType] = Field(default_factory=lambda: list(_ALL_GRANTS))


class ClientPatch(_In):
    """Changes to an OAuth 2.0 client: only the fields given."""

    name: str | None = Field(default=None, min_length=1, max_length=128)
    redirect_uris: list[str] | None = Field(default=None, max_length=16)
    grant_types: list[GrantType] | None = None


def _text(description: str, max_length: int = MAX_FIELD, pattern: str | None = None) -> Any:
    """A field a form must give, non-empty, at most ``max_length`` characters."""
    return Field(min_length=1, max_length=max_length, pattern=pattern, description=description)


def _optional(description: str, max_length: int = MAX_FIELD, pattern: str | None = None) -> Any:
    """A field a form may give (an empty one is an absent one)."""
    return Field(None, max_length=max_length, pattern=pattern, description=description)


def _expected(*values: str) -> WithJsonSchema:
    """The documented values of a text the handler reads whatever it is: RFC 6749 answers
    another value itself (a redirect with the error), not the service's ``400``."""
    return WithJsonSchema({"type": "string", "enum": list(values)})


#: ``code``, the one response type (RFC 6749 4.1.1)
ResponseType = Annotated[str, Field(max_length=_QUERY_FIELD), _expected("code")]
#: ``S256``, the one PKCE method (RFC 7636 4.3)
_PkceMethod = Annotated[str, Field(max_length=_QUERY_FIELD), _expected("S256")]
#: the button the user pressed on the consent page
_Decision = Annotated[str, Field(max_length=_QUERY_FIELD), _expected("allow", "deny")]


class _Client(BaseModel):
    """The client of a token request: in the form, or in HTTP Basic (RFC 6749 2.3.1)."""

    client_id: str | None = _optional(
        "The client; required unless HTTP Basic names it", pattern=CLIENT_ID_PATTERN
    )
    client_secret: str | None = _optional("A confidential client's secret (or HTTP Basic's)")


class PasswordGrant(_Client):
    """The password grant: a user's login and password."""

    grant_type: Literal["password"]
    username: str = _text("The user's login", pattern=_DB_TEXT)
    password: str = _text("The user's password")


class RefreshGrant(_Client):
    """The refresh_token grant: a refresh token, used once (the answer has the next one)."""

    grant_type: Literal["refresh_token"]
    refresh_token: str = _text("The refresh token")


class CodeGrant(_Client):
    """The authorization_code grant: a code of ``/oauth/authorize``, with PKCE's verifier."""

    grant_type: Literal["authorization_code"]
    code: str = _text("The code")
    redirect_uri: str = _text("The redirect URI of the authorization request, exactly")
    code_verifier: str | None = _optional("PKCE: the verifier of the request's code_challenge")


class TokenForm(
    RootModel[
        Annotated[PasswordGrant | RefreshGrant | CodeGrant, Field(discriminator="grant_type")]
    ]
):
    """``POST /oauth/token`` (RFC 6749): one of the grants, by ``grant_type``."""


class AuthorizeRequest(BaseModel):
    """An authorization request (RFC 6749 4.1.1, PKCE RFC 7636): the client, where the code
    goes, and what comes back with it."""

    response_type: ResponseType | None = Field(
        None, description="As the authorization request had it"
    )
    client_id: str = _text("The client", pattern=CLIENT_ID_PATTERN)
    redirect_uri: str = _text("Exactly one of the client's redirect URIs", 2048)
    state: str | None = _optional("Given back with the code", _QUERY_FIELD)
    code_challenge: str | None = _optional(
        "PKCE: BASE64URL(SHA256(verifier)), 43 characters; public clients must", 128
    )
    code_challenge_method: _PkceMethod | None = Field(None, description="PKCE method (only S256)")
    scope: str | None = _optional(
        "Carried along; a token has the user's role and layers", _QUERY_FIELD
    )


class AuthorizeForm(AuthorizeRequest):
    """The login and consent form of ``GET /oauth/authorize``: its request again, the user's
    login and password, and the decision."""

    login: str | None = _optional("The user's login (needed to allow)", pattern=_DB_TEXT)
    password: str | None = _optional("The user's password (needed to allow)")
    decision: _Decision | None = Field(
        None, description="`allow`: a code for the client; anything else: `access_denied`"
    )


class Login(BaseModel):
    """``POST /api/auth``: a login (``user`` and ``username`` are taken too) and password."""

    login: str = Field(
        min_length=1,
        max_length=MAX_FIELD,
        pattern=_DB_TEXT,
        validation_alias=AliasChoices("login", "user", "username"),
        description="The user's login",
    )
    password: str = _text("The user's password")


class User(Answer):
    """A user, never its password."""

    id: int
    login: str
    role: Role
    layers: list[str] | None
    disabled: bool
    created: str
    locked_until: str | None = Field(
        description="While failed logins hold the user locked out: until when (ISO 8601)"
    )


class ApiKey(Answer):
    """An API key's record, never the key."""

    id: str
    name: str
    prefix: str = Field(description="The key's first characters, to tell keys apart")
    role: Role
    layers: list[str] | None
    user_id: int | None
    expires_at: str | None
    revoked_at: str | None = Field(description="When it was revoked (`DELETE`); null: it is not")
    created: str
    last_used: str | None = Field(
        default=None, description="When it was last used (written at most once a minute)"
    )


class ApiKeyCreated(ApiKey):
    """A new key's record and the key itself, shown this once."""

    key: str


class OAuthClient(Answer):
    """An OAuth 2.0 client, never its secret."""

    client_id: str
    name: str
    public: bool
    redirect_uris: list[str]
    grant_types: list[GrantType]
    created: str


class OAuthClientCreated(OAuthClient):
    """A new client and its secret (null for a public client), shown this once."""

    client_secret: str | None


class Token(Answer):
    """RFC 6749 section 5.1: the access token (a JWT) and a refresh token."""

    access_token: str
    token_type: Literal["Bearer"]
    expires_in: int
    refresh_token: str | None = None


class OAuthError(Answer):
    """RFC 6749 section 5.2: how the token endpoint refuses."""

    error: Literal[
        "invalid_request",
        "invalid_client",
        "invalid_grant",
        "unauthorized_client",
        "unsupported_grant_type",
    ]
    error_description: str


class LoginAnswer(Answer):
    """The user's id and login, and an access token (a JWT)."""

    id: int
    login: str
    token: str
