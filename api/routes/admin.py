"""The admin API (spec 4.0 rule 3): ``/users``, ``/api-keys``, ``/oauth-clients``.

Each collection answers ``GET`` (list; ``role`` and ``ord`` query parameters) and ``POST``
(create, ``201``); each item ``GET``, ``PUT`` (change the fields given) and ``DELETE``
(``204``; a key is revoked instead, as ``mapsvc key revoke`` does: ``200`` with its record,
listed with ``revoked=1``). A new key's ``key`` and a new confidential client's
``client_secret`` are in the answer to ``POST`` and never again. Admins only (see
:mod:`api.access`); the same domain functions serve the ``mapsvc user|key|client`` commands.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.openapi.auth_models import ClientIn, ClientPatch, KeyIn, KeyPatch, UserIn, UserPatch
from api.params import FORM_MAX_BYTES, capped, flag
from api.services import services
from shared.auth import keys, oauth, users
from shared.errors import InvalidInputError

__all__ = ["ROUTES", "plain"]

Model = TypeVar("Model", bound=BaseModel)


def plain(value: object) -> Any:
    """A dataclass of the auth domain as JSON values (times in ISO 8601, sets as lists)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)
        }
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


async def _body(request: Request, model: type[Model]) -> Model:
    try:
        body = await capped(request, FORM_MAX_BYTES, "an admin request").body()
        return model.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise InvalidInputError(f"{where}: {first['msg']}", parameter=where) from None


def _query(request: Request) -> dict[str, Any]:
    params = request.query_params
    found: dict[str, Any] = {}
    if "role" in params:
        found["role"] = params["role"]
    if "ord" in params:
        found["ord"] = params["ord"]
    return found


def _item_id(request: Request) -> str:
    return str(request.path_params["id"])


def _user_id(request: Request) -> int:
    raw = _item_id(request)
    if not raw.isdigit() or len(raw) > 18:
        raise InvalidInputError("a user id is a positive integer", parameter="id")
    return int(raw)


async def _changed(request: Request, answer: Any, status: int = 200) -> JSONResponse:
    """The answer to a change, once every kept credential lookup is retired."""
    await services(request).authenticator.forget()
    return JSONResponse(plain(answer), status_code=status)


async def _deleted(request: Request, delete: Callable[..., None], item: object) -> Response:
    await run_in_threadpool(delete, services(request).authenticator.engine, item)
    await services(request).authenticator.forget()
    return Response(status_code=204)


def _engine(request: Request) -> sqlalchemy.Engine:
    return services(request).authenticator.engine


# -- users --------------------------------------------------------------------------------


async def list_users(request: Request) -> JSONResponse:
    """The users (``role``, ``ord``: login, created or id, ``-`` first for descending)."""
    found = await run_in_threadpool(users.list_users, _engine(request), **_query(request))
    return JSONResponse(plain(found))


async def create_users(request: Request) -> JSONResponse:
    """Add a user (``201``)."""
    new = await _body(request, UserIn)
    user = await run_in_threadpool(
        users.add_user, _engine(request), new.login, new.password, new.role, new.layers
    )
    return await _changed(request, user, 201)


async def get_users(request: Request) -> JSONResponse:
    """One user."""
    return JSONResponse(
        plain(await run_in_threadpool(users.get_user, _engine(request), _user_id(request)))
    )


async def put_users(request: Request) -> JSONResponse:
    """Change a user's password, role, layers or disabled flag."""
    changes = (await _body(request, UserPatch)).model_dump(exclude_unset=True)
    user = await run_in_threadpool(
        lambda: users.update_user(_engine(request), _user_id(request), **changes)
    )
    return await _changed(request, user)


async def delete_users(request: Request) -> Response:
    """Remove a user (``204``)."""
    return await _deleted(request, users.delete_user, _user_id(request))


# -- API keys -----------------------------------------------------------------------------


async def list_api_keys(request: Request) -> JSONResponse:
    """The API keys, never the keys themselves (``role``, ``ord``; ``revoked=1``: the revoked
    ones too)."""
    revoked = flag(request, "revoked")
    found = await run_in_threadpool(
        lambda: keys.list_keys(_engine(request), include_revoked=revoked, **_query(request))
    )
    return JSONResponse(plain(found))


async def create_api_keys(request: Request) -> JSONResponse:
    """Make a key (``201``): the answer's ``key`` is shown this once."""
    new = await _body(request, KeyIn)
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


async def get_api_keys(request: Request) -> JSONResponse:
    """One key's record."""
    return JSONResponse(
        plain(await run_in_threadpool(keys.get_key, _engine(request), _item_id(request)))
    )


async def put_api_keys(request: Request) -> JSONResponse:
    """Change a key's name, role, layers or expiry."""
    changes = (await _body(request, KeyPatch)).model_dump(exclude_unset=True)
    key = await run_in_threadpool(
        lambda: keys.update_key(_engine(request), _item_id(request), **changes)
    )
    return await _changed(request, key)


async def delete_api_keys(request: Request) -> JSONResponse:
    """Revoke a key: it is refused from now on, and kept (listed with ``revoked=1``); the
    answer is its record, ``revoked_at`` set (a second revocation keeps the first time)."""
    key = await run_in_threadpool(keys.revoke_key, _engine(request), _item_id(request))
    return await _changed(request, key)


# -- OAuth clients ------------------------------------------------------------------------


async def list_oauth_clients(request: Request) -> JSONResponse:
    """The OAuth 2.0 clients, never their secrets (``ord``)."""
    query = {k: v for k, v in _query(request).items() if k == "ord"}
    found = await run_in_threadpool(lambda: oauth.list_clients(_engine(request), **query))
    return JSONResponse(plain(found))


async def create_oauth_clients(request: Request) -> JSONResponse:
    """Register a client (``201``): a confidential client's ``client_secret`` is shown once."""
    new = await _body(request, ClientIn)
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


async def get_oauth_clients(request: Request) -> JSONResponse:
    """One client's record."""
    return JSONResponse(
        plain(await run_in_threadpool(oauth.get_client, _engine(request), _item_id(request)))
    )


async def put_oauth_clients(request: Request) -> JSONResponse:
    """Change a client's name, redirect URIs or grant types."""
    changes = (await _body(request, ClientPatch)).model_dump(exclude_unset=True)
    client = await run_in_threadpool(
        lambda: oauth.update_client(_engine(request), _item_id(request), **changes)
    )
    return await _changed(request, client)


async def delete_oauth_clients(request: Request) -> Response:
    """Remove a client and its tokens (``204``)."""
    return await _deleted(request, oauth.delete_client, _item_id(request))


def _collection(path: str, name: str) -> list[Route]:
    handlers = globals()
    return [
        Route(path, handlers[f"list_{name}"], methods=["GET"], name=f"list_{name}"),
        Route(path, handlers[f"create_{name}"], methods=["POST"], name=f"create_{name}"),
        Route(f"{path}/{{id}}", handlers[f"get_{name}"], methods=["GET"], name=f"get_{name}"),
        Route(f"{path}/{{id}}", handlers[f"put_{name}"], methods=["PUT"], name=f"put_{name}"),
        Route(
            f"{path}/{{id}}", handlers[f"delete_{name}"], methods=["DELETE"], name=f"delete_{name}"
        ),
    ]


ROUTES = [
    *_collection("/users", "users"),
    *_collection("/api-keys", "api_keys"),
    *_collection("/oauth-clients", "oauth_clients"),
]
