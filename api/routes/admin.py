"""The admin API (spec 4.0 rule 3): ``/users``, ``/api-keys``, ``/oauth-clients``.

Each collection answers ``GET`` (list; ``role`` and ``ord`` query parameters) and ``POST``
(create, ``201``); each item ``GET``, ``PUT`` (change the fields given) and ``DELETE``
(``204``; a key is revoked instead, as ``mapsvc key revoke`` does: ``200`` with its record,
listed with ``revoked=1``). Bodies are JSON, read by the endpoint's wrapper into the ``*In``
and ``*Patch`` models of :mod:`api.openapi.auth_models`. A new key's ``key`` and a new
confidential client's ``client_secret`` are in the answer to ``POST`` and never again. Admins
only (see :mod:`api.access`); the same domain functions serve the ``mapsvc user|key|client``
commands, and every change retires the kept credential lookups at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import sqlalchemy
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.access import Rule
from api.endpoint import Endpoint, Handler
from api.fields import Flag, Query, Text
from api.openapi import auth_models as m
from api.openapi.answers import content, json_body
from api.openapi.models import Schema, ref
from api.services import services
from shared.auth import keys, oauth, users
from shared.auth.plain import plain
from shared.auth.principal import Role

__all__ = ["ENDPOINTS", "plain"]

#: the greatest user id (a PostgreSQL ``bigint``)
_MAX_USER_ID = 2**63 - 1
_ORDER = "Order (`-` first: descending)"


class UserListQuery(Query):
    """Which users, in which order."""

    role: Role | None = Field(None, description="Only this role")
    ord: Literal["login", "-login", "created", "-created", "id", "-id"] = Field(
        "login", description=_ORDER
    )


class KeyListQuery(Query):
    """Which API keys, in which order."""

    role: Role | None = Field(None, description="Only this role")
    ord: Literal[
        "name",
        "-name",
        "created",
        "-created",
        "expires_at",
        "-expires_at",
        "last_used",
        "-last_used",
    ] = Field("-created", description=_ORDER)
    revoked: Flag = Field(False, description="1: revoked keys too")


class ClientListQuery(Query):
    """In which order the OAuth 2.0 clients."""

    ord: Literal["name", "-name", "created", "-created", "client_id", "-client_id"] = Field(
        "name", description=_ORDER
    )


class UserId(Query):
    """A user, by id."""

    id: int = Field(ge=1, le=_MAX_USER_ID, description="The user id")


class KeyId(Query):
    """An API key, by id."""

    id: str = Text(64, description="The key id")


class ClientId(Query):
    """An OAuth 2.0 client, by id."""

    id: str = Field(pattern=m.CLIENT_ID_PATTERN, description="The client id")


async def _changed(request: Request, answer: Any, status: int = 200) -> JSONResponse:
    """The answer to a change, once every kept credential lookup is retired."""
    await services(request).authenticator.forget()
    return JSONResponse(plain(answer), status_code=status)


async def _deleted(request: Request, delete: Callable[..., None], item: object) -> Response:
    await run_in_threadpool(delete, _engine(request), item)
    await services(request).authenticator.forget()
    return Response(status_code=204)


def _engine(request: Request) -> sqlalchemy.Engine:
    return services(request).authenticator.engine


# -- users --------------------------------------------------------------------------------


async def list_users(request: Request, query: UserListQuery) -> JSONResponse:
    """List users"""
    found = await run_in_threadpool(
        lambda: users.list_users(_engine(request), role=query.role, ord=query.ord)
    )
    return JSONResponse(plain(found))


async def create_users(request: Request, new: m.UserIn) -> JSONResponse:
    """Create a user"""
    user = await run_in_threadpool(
        users.add_user, _engine(request), new.login, new.password, new.role, new.layers
    )
    return await _changed(request, user, 201)


async def get_users(request: Request, query: UserId) -> JSONResponse:
    """One user"""
    return JSONResponse(plain(await run_in_threadpool(users.get_user, _engine(request), query.id)))


async def put_users(request: Request, query: UserId, patch: m.UserPatch) -> JSONResponse:
    """Change a user

    Its password, role, layers or disabled flag: only the fields given."""
    changes = patch.model_dump(exclude_unset=True)
    user = await run_in_threadpool(lambda: users.update_user(_engine(request), query.id, **changes))
    return await _changed(request, user)


async def delete_users(request: Request, query: UserId) -> Response:
    """Delete a user"""
    return await _deleted(request, users.delete_user, query.id)


# -- API keys -----------------------------------------------------------------------------


async def list_api_keys(request: Request, query: KeyListQuery) -> JSONResponse:
    """List API keys

    Never the keys themselves; ``revoked=1``: the revoked ones too."""
    found = await run_in_threadpool(
        lambda: keys.list_keys(
            _engine(request), role=query.role, ord=query.ord, include_revoked=query.revoked
        )
    )
    return JSONResponse(plain(found))


async def create_api_keys(request: Request, new: m.KeyIn) -> JSONResponse:
    """Create an API key

    The answer's ``key`` is shown this once."""
    key, secret = await run_in_threadpool(
        lambda: keys.create_key(
            _engine(request),
            new.name,
            new.role,
            layers=new.layers,
            expires_at=new.expires_at,
            user_id=new.user_id,
        )
    )
    return await _changed(request, {**plain(key), "key": secret}, 201)


async def get_api_keys(request: Request, query: KeyId) -> JSONResponse:
    """One API key"""
    return JSONResponse(plain(await run_in_threadpool(keys.get_key, _engine(request), query.id)))


async def put_api_keys(request: Request, query: KeyId, patch: m.KeyPatch) -> JSONResponse:
    """Change an API key

    Its name, role, layers or expiry: only the fields given."""
    changes = patch.model_dump(exclude_unset=True)
    key = await run_in_threadpool(lambda: keys.update_key(_engine(request), query.id, **changes))
    return await _changed(request, key)


async def delete_api_keys(request: Request, query: KeyId) -> JSONResponse:
    """Revoke an API key: refused from now on, still listed with `revoked=1`

    The answer is its record, ``revoked_at`` set (a second revocation keeps the first time)."""
    key = await run_in_threadpool(keys.revoke_key, _engine(request), query.id)
    return await _changed(request, key)


# -- OAuth clients ------------------------------------------------------------------------


async def list_oauth_clients(request: Request, query: ClientListQuery) -> JSONResponse:
    """List OAuth clients

    Never their secrets."""
    found = await run_in_threadpool(lambda: oauth.list_clients(_engine(request), ord=query.ord))
    return JSONResponse(plain(found))


async def create_oauth_clients(request: Request, new: m.ClientIn) -> JSONResponse:
    """Create an OAuth client

    A confidential client's ``client_secret`` is shown this once."""
    client, secret = await run_in_threadpool(
        lambda: oauth.add_client(
            _engine(request),
            new.name,
            new.redirect_uris,
            public=new.public,
            grant_types=tuple(new.grant_types),
        )
    )
    return await _changed(request, {**plain(client), "client_secret": secret}, 201)


async def get_oauth_clients(request: Request, query: ClientId) -> JSONResponse:
    """One OAuth client"""
    return JSONResponse(
        plain(await run_in_threadpool(oauth.get_client, _engine(request), query.id))
    )


async def put_oauth_clients(
    request: Request, query: ClientId, patch: m.ClientPatch
) -> JSONResponse:
    """Change an OAuth client

    Its name, redirect URIs or grant types: only the fields given."""
    changes = patch.model_dump(exclude_unset=True)
    client = await run_in_threadpool(
        lambda: oauth.update_client(_engine(request), query.id, **changes)
    )
    return await _changed(request, client)


async def delete_oauth_clients(request: Request, query: ClientId) -> Response:
    """Delete an OAuth client

    Its tokens with it."""
    return await _deleted(request, oauth.delete_client, query.id)


# -- endpoints ----------------------------------------------------------------------------


def _list(model: type[BaseModel], description: str) -> dict[str, Schema]:
    """The answer of a listing: an array of ``model``."""
    array = {"type": "array", "items": ref(model)}
    return {"200": content("application/json", array, description)}


def _one(model: type[BaseModel], description: str, status: str = "200") -> dict[str, Schema]:
    """The answer of an item: ``model``."""
    return {status: json_body(model, description)}


_DELETED = {"204": {"description": "Deleted"}}
#: the errors of a route with a body: beyond what its rule gives, too large (``413``)
_CREATE_ERRORS, _CHANGE_ERRORS = (409, 413), (404, 413)


def _admin(method: str, path: str, handler: Handler, **declared: Any) -> Endpoint:
    """An endpoint of the admin API: admins only, on the admin budget."""
    return Endpoint(
        method, path, handler, rule=Rule("admin"), budget="admin", tag="admin", **declared
    )


def _collection(
    path: str,
    noun: str,
    handlers: tuple[Handler, Handler, Handler, Handler, Handler],
    queries: tuple[type[Query], type[Query]],
    models: tuple[type[BaseModel], type[BaseModel], type[BaseModel], type[BaseModel]],
    *,
    create_errors: tuple[int, ...] = _CREATE_ERRORS,
    deleted: dict[str, Schema] = _DELETED,
) -> list[Endpoint]:
    """The five endpoints of one collection: ``path`` and its items, ``{path}/{id}``.

    ``handlers``: list, create, get, put and delete; ``queries``: the listing's and the
    item's; ``models``: the item, the created item, the new item's body and the change's body;
    ``noun`` names the item in the answers' descriptions.
    """
    list_, create, get, put, delete = handlers
    list_query, item_query = queries
    item, created, new, patch = models
    item_path = f"{path}/{{id}}"
    return [
        _admin("GET", path, list_, query=list_query, answer=_list(item, f"The {noun}s")),
        _admin(
            "POST",
            path,
            create,
            body=new,
            answer=_one(created, f"The new {noun}", "201"),
            errors=create_errors,
        ),
        _admin(
            "GET", item_path, get, query=item_query, answer=_one(item, f"The {noun}"), errors=(404,)
        ),
        _admin(
            "PUT",
            item_path,
            put,
            query=item_query,
            body=patch,
            answer=_one(item, f"The {noun} now"),
            errors=_CHANGE_ERRORS,
        ),
        _admin("DELETE", item_path, delete, query=item_query, answer=deleted, errors=(404,)),
    ]


ENDPOINTS = [
    *_collection(
        "/users",
        "user",
        (list_users, create_users, get_users, put_users, delete_users),
        (UserListQuery, UserId),
        (m.User, m.User, m.UserIn, m.UserPatch),
    ),
    *_collection(
        "/api-keys",
        "API key",
        (list_api_keys, create_api_keys, get_api_keys, put_api_keys, delete_api_keys),
        (KeyListQuery, KeyId),
        (m.ApiKey, m.ApiKeyCreated, m.KeyIn, m.KeyPatch),
        create_errors=(*_CREATE_ERRORS, 404),  # no user ``user_id``
        deleted=_one(m.ApiKey, "The key, revoked (`revoked_at` set)"),
    ),
    *_collection(
        "/oauth-clients",
        "OAuth client",
        (
            list_oauth_clients,
            create_oauth_clients,
            get_oauth_clients,
            put_oauth_clients,
            delete_oauth_clients,
        ),
        (ClientListQuery, ClientId),
        (m.OAuthClient, m.OAuthClientCreated, m.ClientIn, m.ClientPatch),
    ),
]
