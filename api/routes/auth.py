"""Getting tokens: OAuth 2.0 (``/oauth/token``, ``/oauth/authorize``) and ``POST /api/auth``.

The token endpoint answers errors in RFC 6749's own form (``{"error": "invalid_grant",
"error_description": …}``), which OAuth client libraries read; every other route keeps the
service's error shape. Passwords are checked with the same throttles as Basic logins.
"""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

import shared.auth.oauth as oauth
from api.authn import read_credentials
from api.params import FORM_MAX_BYTES, capped
from api.services import services
from shared.auth.errors import InvalidRequestError, OAuthError
from shared.auth.tokens import issue_access_token
from shared.auth.users import User
from shared.errors import (
    InvalidInputError,
    MapsvcError,
    TooManyRequestsError,
    UnauthorizedError,
)

__all__ = ["ROUTES"]

_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
#: the authorize page may not be framed (clickjacking) nor run scripts
_PAGE_HEADERS = {
    **_NO_STORE,
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
}
_MAX_FIELD = 4096


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
        if not isinstance(value, str) or len(value) > _MAX_FIELD:
            raise InvalidInputError(f"{name} must be a string", parameter=name)
        fields[name] = value
    return fields


def _need(fields: dict[str, str], name: str) -> str:
    value = fields.get(name, "")
    if not value:
        raise InvalidRequestError(f"{name} is required")
    return value


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
    """``POST /oauth/token`` (RFC 6749): the password, refresh_token and authorization_code
    grants; the client authenticates with ``client_id``/``client_secret`` or HTTP Basic."""
    try:
        return await _token(request)
    except MapsvcError as exc:
        if isinstance(exc, TooManyRequestsError):
            raise  # 429 with Retry-After (a locked account too), in the service's shape
        return _oauth_error(exc)


async def _token(request: Request) -> Response:
    fields = await _fields(request)
    svc = services(request)
    engine, auth = svc.authenticator.engine, svc.settings.auth
    client_id, secret = fields.get("client_id", ""), fields.get("client_secret") or None
    basic = read_credentials(request.headers, request.query_params)
    if basic is not None and basic.kind == "basic":  # client authentication (RFC 6749 2.3.1)
        client_id, secret = basic.login, basic.secret
    if not client_id:
        raise InvalidRequestError("client_id is required")
    client = await run_in_threadpool(oauth.check_client, engine, client_id, secret)
    grant = _need(fields, "grant_type")
    oauth.check_grant_type(client, grant)
    if grant == "password":
        user = await _login(request, _need(fields, "username"), _need(fields, "password"))
        refresh = await run_in_threadpool(
            oauth.issue_refresh_token, engine, user.id, client.client_id, auth.refresh_ttl_s
        )
        return _token_answer(request, user, refresh)
    if grant == "refresh_token":
        user, refresh = await run_in_threadpool(
            oauth.rotate_refresh_token,
            engine,
            _need(fields, "refresh_token"),
            client.client_id,
            auth.refresh_ttl_s,
        )
        return _token_answer(request, user, refresh)
    # authorization_code (check_grant_type refused every other grant); a code shown again
    # revokes the refresh tokens issued from it
    user, refresh = await run_in_threadpool(
        oauth.exchange_code,
        engine,
        _need(fields, "code"),
        client.client_id,
        _need(fields, "redirect_uri"),
        fields.get("code_verifier") or None,
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

_AUTHORIZE_FIELDS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "state",
    "code_challenge",
    "code_challenge_method",
    "scope",
)


def _page(
    request: Request, client_name: str, fields: dict[str, str], error: str = "", status: int = 200
) -> HTMLResponse:
    hidden = "".join(
        f'<input type="hidden" name="{name}" value="{html.escape(fields[name])}">'
        for name in _AUTHORIZE_FIELDS
        if fields.get(name)
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


def _redirect(redirect_uri: str, params: dict[str, str]) -> RedirectResponse:
    glue = "&" if "?" in redirect_uri else "?"
    return RedirectResponse(
        f"{redirect_uri}{glue}{urlencode(params)}", status_code=302, headers=_NO_STORE
    )


async def _checked_client(request: Request, fields: dict[str, str]) -> oauth.Client:
    """The client of an authorize request whose ``redirect_uri`` is one of its own, exactly.

    Raises:
        MapsvcError: unknown client or redirect URI; the page says so and never redirects.
    """
    engine = services(request).authenticator.engine
    client = await run_in_threadpool(oauth.get_client, engine, fields.get("client_id", ""))
    if fields.get("redirect_uri") not in client.redirect_uris:
        raise InvalidInputError("the redirect_uri is not one registered for this client")
    return client


async def get_authorize(request: Request) -> Response:
    """``GET /oauth/authorize``: the login and consent page of the authorization code grant."""
    fields = {name: request.query_params.get(name, "")[:_MAX_FIELD] for name in _AUTHORIZE_FIELDS}
    try:
        client = await _checked_client(request, fields)
    except MapsvcError as exc:
        return _error_page(exc.message)
    if fields["response_type"] != "code":
        return _redirect(
            fields["redirect_uri"],
            {"error": "unsupported_response_type", "state": fields["state"]},
        )
    return _page(request, client.name, fields)


async def post_authorize(request: Request) -> Response:
    """The login form posted: a code sent to the client's redirect URI, or the page again."""
    try:
        fields = await _fields(request)
        client = await _checked_client(request, fields)
    except MapsvcError as exc:
        return _error_page(exc.message)
    state = {"state": fields["state"]} if fields.get("state") else {}
    if fields.get("decision") != "allow":
        return _redirect(fields["redirect_uri"], {"error": "access_denied", **state})
    try:
        user = await _login(request, fields.get("login", ""), fields.get("password", ""))
        code = await run_in_threadpool(
            oauth.issue_code,
            services(request).authenticator.engine,
            client.client_id,
            user.id,
            fields["redirect_uri"],
            fields.get("code_challenge") or None,
            fields.get("code_challenge_method") or None,
            services(request).settings.auth.auth_code_ttl_s,
        )
    except OAuthError as exc:  # a public client without PKCE, say: the client's mistake
        return _redirect(
            fields["redirect_uri"],
            {"error": str(exc.detail["oauth_error"]), "error_description": exc.message, **state},
        )
    except MapsvcError as exc:  # wrong login, locked account, throttled: the user's
        return _page(request, client.name, fields, exc.message, status=401)
    return _redirect(fields["redirect_uri"], {"code": code, **state})


async def post_login(request: Request) -> JSONResponse:
    """``POST /api/auth`` with ``login`` (or ``user``) and ``password``: ``{id, login, token}``,
    the token a JWT access token."""
    fields = await _fields(request)
    login = fields.get("login") or fields.get("user") or fields.get("username") or ""
    password = fields.get("password", "")
    if not login or not password:
        raise InvalidInputError("login and password are required", parameter="login")
    user = await _login(request, login, password)
    svc = services(request)
    token = issue_access_token(svc.authenticator.keys, user, svc.settings.auth.jwt_ttl_s)
    return JSONResponse({"id": user.id, "login": user.login, "token": token}, headers=_NO_STORE)


#: the OAuth routes and the login, under each mount and at the root (``/api/auth``,
#: ``/api-user/api/auth``, ``/api/v1/api/auth``)
ROUTES = [
    Route("/oauth/token", post_token, methods=["POST"], name="post_token"),
    Route("/oauth/authorize", get_authorize, methods=["GET"], name="get_authorize"),
    Route("/oauth/authorize", post_authorize, methods=["POST"], name="post_authorize"),
    Route("/api/auth", post_login, methods=["POST"], name="post_login"),
]
