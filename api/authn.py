"""Authentication: who sent a request, from the credentials it carries (docs/auth.md).

Accepted forms, one per request (two, even alike, are refused: `read_credentials`):

- ``Authorization: Bearer <token>``: a JWT access token (``POST /oauth/token``,
  ``POST /api/auth``), or an API key used as a static bearer token;
- ``Authorization: ApiKey <key>`` or ``Authorization: <key>`` (the key alone);
- ``Authorization: Basic base64(login:password)``;
- the query parameter ``api_key=<key>``.

A request without credentials is anonymous; credentials that are not valid are refused at once
(``401``), never taken as anonymous. What they prove, the lookups kept in Redis and the
throttles of failures are the domain's: :class:`shared.auth.authenticator.Authenticator`.
"""

from __future__ import annotations

import base64
import binascii

from starlette.datastructures import Headers, QueryParams
from starlette.requests import Request
from starlette.responses import Response

from api.errors import error_for, www_authenticate
from api.scope import PRINCIPAL_KEY
from api.services import services
from shared.auth.authenticator import Credentials
from shared.auth.keys import is_api_key
from shared.auth.principal import ANONYMOUS
from shared.errors import InvalidInputError, UnauthorizedError

__all__ = ["identify", "read_credentials"]


def _basic(encoded: str) -> Credentials:
    try:
        login, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise UnauthorizedError("Basic credentials are not base64 of login:password") from None
    if not sep or not login or not password:
        raise UnauthorizedError("Basic credentials are not base64 of login:password")
    return Credentials("basic", password, login)


def _header_credentials(header: str) -> Credentials:
    scheme, _, value = header.partition(" ")
    value = value.strip()
    match scheme.lower():
        case "bearer" if value:
            return Credentials("key" if is_api_key(value) else "token", value)
        case "apikey" if value:
            return Credentials("key", value)
        case "basic" if value:
            return _basic(value)
    if is_api_key(header):
        return Credentials("key", header)
    raise UnauthorizedError(
        "the Authorization header must be Bearer <token>, ApiKey <key> or Basic <credentials>"
    )


def read_credentials(headers: Headers, query: QueryParams) -> Credentials | None:
    """The credentials of a request, or None when it has none.

    The one parser of credentials: the nginx front asks the API rather than read them itself
    (api/front.py). A request offers one credential, an ``Authorization`` header or one
    ``api_key`` parameter; more of them (the header twice, ``api_key`` twice, or both, even
    alike) are refused, as RFC 6750 section 2 asks. An empty ``Authorization`` header is no
    header; an empty ``api_key`` is refused.

    Raises:
        InvalidInputError: more than one credential (400).
        UnauthorizedError: an empty ``api_key``, or an ``Authorization`` header of a form this
            service does not take (401).
    """
    offered = [value for value in map(str.strip, headers.getlist("authorization")) if value]
    keys = query.getlist("api_key")
    if len(offered) + len(keys) > 1:
        raise InvalidInputError(
            "one credential per request: an Authorization header or one api_key parameter",
            parameter="Authorization" if len(offered) > 1 else "api_key",
        )
    if keys:
        if not keys[0]:
            raise UnauthorizedError("the api_key parameter is empty")
        return Credentials("key", keys[0])
    return _header_credentials(offered[0]) if offered else None


async def identify(request: Request) -> Response | None:
    """Put the request's principal into its scope (``PRINCIPAL_KEY``; anonymous without
    credentials); the refusal of credentials that are not valid (401, 429), else None."""
    scope = request.scope
    scope[PRINCIPAL_KEY] = ANONYMOUS
    try:
        credentials = read_credentials(request.headers, request.query_params)
        if credentials is not None:
            address = scope["client"][0] if scope.get("client") else ""
            authenticator = services(request).authenticator
            scope[PRINCIPAL_KEY] = await authenticator.principal(credentials, address)
    except Exception as exc:  # noqa: BLE001 - every failure becomes its JSON error
        response = await error_for(request, exc)
        if isinstance(exc, UnauthorizedError):
            response.headers["WWW-Authenticate"] = www_authenticate("invalid_token")
        return response
    return None
