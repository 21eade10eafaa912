"""The operations of the token routes (``api.routes.auth``) and the admin API
(``api.routes.admin``)."""

from __future__ import annotations

from pydantic import BaseModel

from api.openapi import auth_models as m
from api.openapi.models import Schema, ref
from api.openapi.operation import Operation, content, json_body
from api.openapi.parameters import flag, param, text

__all__ = ["operations"]

_TOKEN_FORM: Schema = {
    "type": "object",
    "required": ["grant_type"],
    "properties": {
        "grant_type": {
            "type": "string",
            "enum": ["password", "refresh_token", "authorization_code"],
        },
        "client_id": {"type": "string", "maxLength": 4096},
        "client_secret": {"type": "string", "maxLength": 4096},
        "username": {"type": "string", "maxLength": 4096},
        "password": {"type": "string", "maxLength": 4096},
        "refresh_token": {"type": "string", "maxLength": 4096},
        "code": {"type": "string", "maxLength": 4096},
        "redirect_uri": {"type": "string", "maxLength": 4096},
        "code_verifier": {"type": "string", "maxLength": 4096},
    },
}
_AUTHORIZE = [
    text("query", "response_type", "`code`", required=True),
    text("query", "client_id", "The client", required=True),
    text("query", "redirect_uri", "Exactly one of the client's redirect URIs", required=True),
    text("query", "state", "Given back with the code"),
    text("query", "code_challenge", "PKCE: BASE64URL(SHA256(verifier)); public clients must"),
    param("query", "code_challenge_method", {"enum": ["S256"]}, "PKCE method (only S256)"),
]
_HTML = content("text/html", {"type": "string"}, "The login and consent page")
_CANNOT = content(
    "text/html", {"type": "string"}, "A page saying why not (an unknown client or redirect URI)"
)
_ROLE = param("query", "role", {"enum": ["reader", "operator", "admin"]}, "Only this role")
_KEY_ID = text("path", "id", "The key id", max_length=64)


def _ord(*fields: str) -> Schema:
    values = [f"{sign}{f}" for f in fields for sign in ("", "-")]
    return param("query", "ord", {"enum": values}, "Order (`-` first: descending)")


def _body(model: type[BaseModel]) -> Schema:
    return {"required": True, "content": {"application/json": {"schema": ref(model)}}}


def _array(model: type[BaseModel], description: str) -> Schema:
    return content("application/json", {"type": "array", "items": ref(model)}, description)


def _collection(
    name: str,
    what: str,
    item: type[BaseModel],
    created: type[BaseModel],
    new: type[BaseModel],
    patch: type[BaseModel],
    filters: list[Schema],
    item_id: Schema,
) -> dict[str, Operation]:
    """The five operations of an admin collection ``name`` of ``what``s."""
    return {
        f"list_{name}": Operation(f"List {what}s", "admin", filters, {"200": _array(item, "")}),
        f"create_{name}": Operation(
            f"Create a {what}",
            "admin",
            responses={"201": json_body(created, f"The new {what}")},
            errors=[409],
            request_body=_body(new),
        ),
        f"get_{name}": Operation(
            f"One {what}", "admin", [item_id], {"200": json_body(item, "")}, [404]
        ),
        f"put_{name}": Operation(
            f"Change a {what}",
            "admin",
            [item_id],
            {"200": json_body(item, f"The {what} now")},
            [404],
            _body(patch),
        ),
        f"delete_{name}": Operation(
            f"Delete a {what}", "admin", [item_id], {"204": {"description": "Deleted"}}, [404]
        ),
    }


def operations() -> dict[str, Operation]:
    """The operations of the token and admin routes by name."""
    return {
        "post_token": Operation(
            "OAuth 2.0 token endpoint (RFC 6749): password, refresh_token, authorization_code",
            "auth",
            responses={
                "200": json_body(m.Token, "The tokens"),
                "400": json_body(m.OAuthError, "Refused (RFC 6749 section 5.2)"),
                "401": json_body(m.OAuthError, "Unknown client or wrong secret"),
            },
            errors=[429],
            request_body={
                "required": True,
                "content": {"application/x-www-form-urlencoded": {"schema": _TOKEN_FORM}},
            },
        ),
        "get_authorize": Operation(
            "OAuth 2.0 authorization endpoint: the login and consent page",
            "auth",
            _AUTHORIZE,
            {
                "200": _HTML,
                "302": {"description": "Back to the redirect URI with an error"},
                "400": _CANNOT,
            },
        ),
        "post_authorize": Operation(
            "The login form: back to the redirect URI with a code",
            "auth",
            responses={"302": {"description": "To the redirect URI"}, "400": _CANNOT, "401": _HTML},
            request_body={
                "required": True,
                "content": {
                    "application/x-www-form-urlencoded": {
                        "schema": {"type": "object", "additionalProperties": {"type": "string"}}
                    }
                },
            },
        ),
        "post_login": Operation(
            "Log in: the user's id, login and an access token",
            "auth",
            responses={"200": json_body(m.LoginAnswer, "Logged in")},
            errors=[401, 413, 429],
            request_body=_body(m.Login),
        ),
        **_collection(
            "users",
            "user",
            m.User,
            m.User,
            m.UserIn,
            m.UserPatch,
            [_ROLE, _ord("login", "created", "id")],
            param("path", "id", {"type": "integer", "minimum": 1}, "The user id"),
        ),
        **_collection(
            "api_keys",
            "API key",
            m.ApiKey,
            m.ApiKeyCreated,
            m.KeyIn,
            m.KeyPatch,
            [_ROLE, _ord("name", "created"), flag("revoked", "1: revoked keys too")],
            _KEY_ID,
        ),
        # DELETE revokes a key: it stays listed (``revoked=1``) with its revocation time
        "delete_api_keys": Operation(
            "Revoke an API key: refused from now on, still listed with `revoked=1`",
            "admin",
            [_KEY_ID],
            {"200": json_body(m.ApiKey, "The key, revoked (`revoked_at` set)")},
            [404],
        ),
        **_collection(
            "oauth_clients",
            "OAuth client",
            m.OAuthClient,
            m.OAuthClientCreated,
            m.ClientIn,
            m.ClientPatch,
            [_ord("name", "created")],
            text("path", "id", "The client id", max_length=64),
        ),
    }
