"""The bodies of the authentication and admin routes: what they take and what they answer.

The ``*In`` and ``*Patch`` models also validate the admin API's request bodies
(:mod:`api.routes.admin`); unknown fields are refused.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.auth.principal import Role

__all__ = [
    "ApiKey",
    "ApiKeyCreated",
    "ClientIn",
    "ClientPatch",
    "GrantType",
    "KeyIn",
    "KeyPatch",
    "Login",
    "LoginAnswer",
    "OAuthClient",
    "OAuthClientCreated",
    "OAuthError",
    "Token",
    "User",
    "UserIn",
    "UserPatch",
]

GrantType = Literal["authorization_code", "refresh_token", "password"]
_ALL_GRANTS: list[GrantType] = ["authorization_code", "refresh_token", "password"]
_LAYERS = "Layer ids the holder may see; null: every layer"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserIn(_In):
    """A new user."""

    login: str = Field(min_length=1, max_length=128)
    password: str = Field(min_length=8, max_length=1024)
    role: Role = "reader"
    layers: list[str] | None = Field(default=None, description=_LAYERS)


class UserPatch(_In):
    """Changes to a user: only the fields given."""

    password: str | None = Field(default=None, min_length=8, max_length=1024)
    role: Role | None = None
    layers: list[str] | None = Field(default=None, description=_LAYERS)
    disabled: bool | None = None


class KeyIn(_In):
    """A new API key."""

    name: str = Field(min_length=1, max_length=128)
    role: Role = "reader"
    layers: list[str] | None = Field(default=None, description=_LAYERS)
    expires_at: datetime | None = Field(default=None, description="ISO 8601; null: never")
    user_id: int | None = Field(default=None, description="The user the key acts for")


class KeyPatch(_In):
    """Changes to an API key: only the fields given."""

    name: str | None = Field(default=None, min_length=1, max_length=128)
    role: Role | None = None
    layers: list[str] | None = Field(default=None, description=_LAYERS)
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


class User(BaseModel):
    """A user, never its password."""

    id: int
    login: str
    role: Role
    layers: list[str] | None
    disabled: bool
    created: str


class ApiKey(BaseModel):
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


class OAuthClient(BaseModel):
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


class Token(BaseModel):
    """RFC 6749 section 5.1: the access token (a JWT) and a refresh token."""

    access_token: str
    token_type: Literal["Bearer"]
    expires_in: int
    refresh_token: str | None = None


class OAuthError(BaseModel):
    """RFC 6749 section 5.2: how the token endpoint refuses."""

    error: Literal[
        "invalid_request",
        "invalid_client",
        "invalid_grant",
        "unauthorized_client",
        "unsupported_grant_type",
    ]
    error_description: str


class Login(BaseModel):
    """``POST /api/auth``: a login (``user`` and ``username`` are taken too) and password."""

    login: str
    password: str


class LoginAnswer(BaseModel):
    """The user's id and login, and an access token (a JWT)."""

    id: int
    login: str
    token: str
