"""Getting tokens: OAuth 2.0 (``/oauth/token``, ``/oauth/authorize``) and ``POST /api/auth``.

The token endpoint answers errors in RFC 6749's own form (``{"error": "invalid_grant",
"error_description": …}``), which OAuth client libraries read, and the authorization endpoint
as RFC 6749 4.1.2.1 says (a page for the user, or a redirect with the error); every other route
keeps the service's error shape. Passwords are checked with the same throttles as Basic logins.
Each route reads credentials of its own, and answers at the root as well as under each mount.
"""

from __future__ import annotations

import html
import re
from typing import Any, TypeVar
from urllib.parse import urlencode

from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

import shared.auth.oauth as oauth
from api.access import Rule
from api.authn import read_credentials
from api.bodies import FORM_MAX_BYTES, capped
from api.endpoint import Endpoint
from api.fields import Query
from api.openapi import auth_models as m
from api.openapi.answers import content, json_body, request_body
from api.openapi.models import ErrorResponse, Schema, ref
from api.services import services
from shared.auth.errors import (
    InvalidClientError,
    InvalidRequestError,
    OAuthError,
    UnsupportedGrantTypeError,
)
from shared.auth.tokens import issue_access_token
from shared.auth.users import User
from shared.errors import (
    InvalidInputError,
    MapsvcError,
    TooManyRequestsError,
    UnauthorizedError,
)

__all__ = ["ENDPOINTS"]

M = TypeVar("M", bound=BaseModel)
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
#: the authorize page may not be framed (clickjacking) nor run scripts
_PAGE_HEADERS = {
    **_NO_STORE,
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
}
_FORM = "application/x-www-form-urlencoded"


class AuthorizeQuery(Query, m.AuthorizeRequest):
    """The authorization request of ``GET /oauth/authorize``, in the query."""

    response_type: m.ResponseType = Field(
        description="`code`; another is sent back to the redirect URI as"
        " `unsupported_response_type`",
    )


async def _fields(request: Request) -> dict[str, str]:
    """The fields of a form (urlencoded or multipart) or JSON object body, at most
    ``FORM_MAX_BYTES`` (413 past it, before more is read)."""
    request = capped(request, FORM_MAX_BYTES, "a login, token or consent form")
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            body = await request.json()
        except ValueError:
            raise InvalidInputError("the body is not JSON") from None
        if not isinstance(body, dict):
            raise InvalidInputError("the body must be a JSON object")
        items: list[tuple[str, Any]] = list(body.items())
    else:
        form: FormData = await request.form(max_files=0, max_fields=32)
        items = list(form.items())
    fields = {}
    for name, value in items:
        if not isinstance(value, str) or len(value) > m.MAX_FIELD:
            raise InvalidInputError(f"{name} must be a string", parameter=name)
        fields[name] = value
    return fields


async def _form(request: Request, model: type[M]) -> M:
    """The body's fields (:func:`_fields`; an empty one is an absent one) as ``model``.

    Read here rather than by the endpoint's wrapper: these bodies are JSON or a form, and the
    token endpoint words every refusal as RFC 6749 does.

    Raises:
        InvalidInputError: a field missing or refused (``detail.parameter`` names it).
        UnsupportedGrantTypeError: a ``grant_type`` the token endpoint does not know.
    """
    fields = {name: value for name, value in (await _fields(request)).items() if value}
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        context = error.get("ctx", {})
        if error["type"] == "union_tag_invalid":  # the one union: the token form's grants
            raise UnsupportedGrantTypeError(f"unsupported grant type {context['tag']!r}") from None
        # an error of no field is the union's: its tag (``'grant_type'``) is missing
        name = str(error["loc"][-1]) if error["loc"] else context["discriminator"].strip("'")
        if error["type"] in {"missing", "union_tag_not_found"}:
            raise InvalidInputError(f"{name} is required", parameter=name) from None
        raise InvalidInputError(f"{name}: {error['msg']}", parameter=name) from None


async def _login(request: Request, login: str, password: str) -> User:
    """The user with this login and password, under the login throttles."""
    auth = services(request).authenticator
    address = request.client.host if request.client else ""
    return await auth.login(login, password, address)


def _token_answer(request: Request, user: User, refresh_token: str | None) -> JSONResponse:
    svc = services(request)
    ttl_s = svc.settings.auth.jwt_ttl_s
    body: dict[str, Any] = {
        "access_token": issue_access_token(svc.authenticator.keys, user, ttl_s),
        "token_type": "Bearer",
        "expires_in": ttl_s,
    }
    if refresh_token is not None:
        body["refresh_token"] = refresh_token
    return JSONResponse(body, headers=_NO_STORE)


def _oauth_error(exc: MapsvcError) -> JSONResponse:
    # a wrong login or password of the password grant is the grant's fault (RFC 6749 5.2)
    fallback = "invalid_grant" if isinstance(exc, UnauthorizedError) else "invalid_request"
    code = str(exc.detail.get("oauth_error", fallback))
    status = 401 if code == "invalid_client" else 400
    headers = dict(_NO_STORE)
    if status == 401:
        headers["WWW-Authenticate"] = 'Basic realm="mapsvc"'
    body = {"error": code, "error_description": exc.message}
    return JSONResponse(body, status_code=status, headers=headers)


async def post_token(request: Request) -> Response:
    """OAuth 2.0 token endpoint (RFC 6749): password, refresh_token, authorization_code

    The client authenticates with ``client_id``/``client_secret`` or HTTP Basic."""
    try:
        return await _token(request)
    except MapsvcError as exc:
        if isinstance(exc, TooManyRequestsError):
            raise  # 429 with Retry-After (a locked account too), in the service's shape
        return _oauth_error(exc)


async def _token(request: Request) -> Response:
    grant = (await _form(request, m.TokenForm)).root
    svc = services(request)
    engine, auth = svc.authenticator.engine, svc.settings.auth
    client_id, secret = grant.client_id, grant.client_secret
    basic = read_credentials(request.headers, request.query_params)
    if basic is not None and basic.kind == "basic":  # client authentication (RFC 6749 2.3.1)
        client_id, secret = basic.login, basic.secret
    if not client_id:
        raise InvalidRequestError("client_id is required")
    if not re.fullmatch(m.CLIENT_ID_PATTERN, client_id):  # HTTP Basic's: no client has it
        raise InvalidClientError("unknown client or wrong client credentials")
    client = await run_in_threadpool(oauth.check_client, engine, client_id, secret)
    oauth.check_grant_type(client, grant.grant_type)
    if isinstance(grant, m.PasswordGrant):
        user = await _login(request, grant.username, grant.password)
        refresh = await run_in_threadpool(
            oauth.issue_refresh_token, engine, user.id, client.client_id, auth.refresh_ttl_s
        )
        return _token_answer(request, user, refresh)
    if isinstance(grant, m.RefreshGrant):
        user, refresh = await run_in_threadpool(
            oauth.rotate_refresh_token,
            engine,
            grant.refresh_token,
            client.client_id,
            auth.refresh_ttl_s,
        )
        return _token_answer(request, user, refresh)
    # authorization_code; a code shown again revokes the refresh tokens issued from it
    user, refresh = await run_in_threadpool(
        oauth.exchange_code,
        engine,
        grant.code,
        client.client_id,
        grant.redirect_uri,
        grant.code_verifier,
        auth.refresh_ttl_s,
    )
    return _token_answer(request, user, refresh)


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in to mapsvc</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font:16px system-ui,sans-serif;max-width:24rem;margin:3rem auto;padding:0 1rem}}
label{{display:block;margin:.8rem 0 .2rem}}input{{width:100%;padding:.4rem;font:inherit}}
button{{margin-top:1rem;padding:.5rem 1rem;font:inherit}}.error{{color:#a00}}</style></head>
<body><h1>Sign in to mapsvc</h1>
<p><strong>{client}</strong> asks to use mapsvc as you, with your role and layers.</p>
{error}<form method="post" action="{action}">{hidden}
<label for="login">Login</label><input id="login" name="login" autocomplete="username" required>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny">Deny</button>
</form></body></html>
"""


def _page(
    request: Request,
    client_name: str,
    asked: m.AuthorizeRequest,
    error: str = "",
    status: int = 200,
) -> HTMLResponse:
    """The login and consent page, the authorization request ``asked`` in hidden fields."""
    hidden = "".join(
        f'<input type="hidden" name="{name}" value="{html.escape(value)}">'
        for name in m.AuthorizeRequest.model_fields
        if (value := getattr(asked, name))
    )
    body = _PAGE.format(
        client=html.escape(client_name),
        error=f'<p class="error">{html.escape(error)}</p>' if error else "",
        action=html.escape(request.url.path),
        hidden=hidden,
    )
    return HTMLResponse(body, status_code=status, headers=_PAGE_HEADERS)


def _error_page(message: str, status: int = 400) -> HTMLResponse:
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>mapsvc</title></head>'
        f"<body><h1>Cannot sign in</h1><p>{html.escape(message)}</p></body></html>"
    )
    return HTMLResponse(body, status_code=status, headers=_PAGE_HEADERS)


def _redirect(asked: m.AuthorizeRequest, params: dict[str, str]) -> RedirectResponse:
    """Back to the request's redirect URI with ``params``, and its ``state`` if it had one."""
    if asked.state:
        params = {**params, "state": asked.state}
    uri = asked.redirect_uri
    glue = "&" if "?" in uri else "?"
    return RedirectResponse(f"{uri}{glue}{urlencode(params)}", status_code=302, headers=_NO_STORE)


async def _checked_client(request: Request, asked: m.AuthorizeRequest) -> oauth.Client:
    """The client of an authorize request whose ``redirect_uri`` is one of its own, exactly.

    Raises:
        MapsvcError: unknown client or redirect URI; the page says so and never redirects.
    """
    engine = services(request).authenticator.engine
    client = await run_in_threadpool(oauth.get_client, engine, asked.client_id)
    if asked.redirect_uri not in client.redirect_uris:
        raise InvalidInputError("the redirect_uri is not one registered for this client")
    return client


async def get_authorize(request: Request, query: AuthorizeQuery) -> Response:
    """OAuth 2.0 authorization endpoint: the login and consent page

    Of the authorization code grant; an unknown client or redirect URI is a page saying so,
    another ``response_type`` a redirect with ``unsupported_response_type``."""
    try:
        client = await _checked_client(request, query)
    except MapsvcError as exc:
        return _error_page(exc.message)
    if query.response_type != "code":
        return _redirect(query, {"error": "unsupported_response_type"})
    return _page(request, client.name, query)


async def post_authorize(request: Request, form: m.AuthorizeForm) -> Response:
    """The login form: back to the redirect URI with a code

    Or with ``access_denied``, or an OAuth error (a public client without PKCE); a wrong login
    shows the page again."""
    try:
        client = await _checked_client(request, form)
    except MapsvcError as exc:
        return _error_page(exc.message)
    if form.decision != "allow":
        return _redirect(form, {"error": "access_denied"})
    svc = services(request)
    try:
        user = await _login(request, form.login or "", form.password or "")
        code = await run_in_threadpool(
            oauth.issue_code,
            svc.authenticator.engine,
            client.client_id,
            user.id,
            form.redirect_uri,
            form.code_challenge or None,
            form.code_challenge_method or None,
            svc.settings.auth.code_ttl_s,
        )
    except OAuthError as exc:  # a public client without PKCE, say: the client's mistake
        oauth_error = str(exc.detail["oauth_error"])
        return _redirect(form, {"error": oauth_error, "error_description": exc.message})
    except MapsvcError as exc:  # wrong login, locked account, throttled: the user's
        return _page(request, client.name, form, exc.message, status=401)
    return _redirect(form, {"code": code})


async def post_login(request: Request) -> JSONResponse:
    """Log in: the user's id, login and an access token

    ``login`` (or ``user``, ``username``) and ``password``, as JSON or a form: ``{id, login,
    token}``, the token a JWT access token."""
    form = await _form(request, m.Login)
    user = await _login(request, form.login, form.password)
    svc = services(request)
    token = issue_access_token(svc.authenticator.keys, user, svc.settings.auth.jwt_ttl_s)
    return JSONResponse({"id": user.id, "login": user.login, "token": token}, headers=_NO_STORE)


_HTML: Schema = {"type": "string"}
#: the refusals of the authorization endpoint: a page for the user, or a malformed request
_CANNOT: Schema = {
    "description": "A page saying why not (an unknown client or redirect URI), or a malformed"
    " request",
    "content": {
        "text/html": {"schema": _HTML},
        "application/json": {"schema": ref(ErrorResponse)},
    },
}


def _auth(method: str, path: str, handler: Any, **declared: Any) -> Endpoint:
    """A route that reads credentials of its own, open to anyone, at the root too."""
    return Endpoint(
        method,
        path,
        handler,
        rule=Rule(None),
        budget="auth",
        tag="auth",
        own_credentials=True,
        place="mounts+root",
        **declared,
    )


#: the OAuth routes and the login, under each mount and at the root (``/api/auth``,
#: ``/api-user/api/auth``, ``/api/v1/api/auth``)
ENDPOINTS = [
    _auth(
        "POST",
        "/oauth/token",
        post_token,
        ignores_unknown=True,  # RFC 6749 3.1, 3.2
        body=request_body(m.TokenForm, _FORM),
        answer={
            "200": json_body(m.Token, "The tokens"),
            "400": json_body(m.OAuthError, "Refused (RFC 6749 section 5.2)"),
            "401": json_body(m.OAuthError, "Unknown client or wrong secret"),
        },
        errors=(429,),
    ),
    _auth(
        "GET",
        "/oauth/authorize",
        get_authorize,
        ignores_unknown=True,  # RFC 6749 3.1, 3.2
        query=AuthorizeQuery,
        answer={
            "200": content("text/html", _HTML, "The login and consent page"),
            "302": {"description": "Back to the redirect URI with an error"},
            "400": _CANNOT,
        },
    ),
    _auth(
        "POST",
        "/oauth/authorize",
        post_authorize,
        ignores_unknown=True,  # RFC 6749 3.1, 3.2
        body=m.AuthorizeForm,
        body_media=_FORM,
        answer={
            "302": {"description": "To the redirect URI"},
            "400": _CANNOT,
            "401": content("text/html", _HTML, "The login and consent page"),
        },
        errors=(413,),
    ),
    _auth(
        "POST",
        "/api/auth",
        post_login,
        body=request_body(m.Login, "application/json", _FORM),
        answer={"200": json_body(m.LoginAnswer, "Logged in")},
        errors=(401, 413, 429),
    ),
]
