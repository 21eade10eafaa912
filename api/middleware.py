"""Middleware: request ids (taken from ``X-Request-ID`` or made), and the allowed hosts."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response
from shared.logs import REQUEST_ID

__all__ = ["AllowedHostsMiddleware", "HttpMiddleware", "RequestIdMiddleware"]

_VALID_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class HttpMiddleware:
    """A pure-ASGI middleware of HTTP requests: other scopes (lifespan) pass straight on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one HTTP request (``scope["type"] == "http"``)."""
        raise NotImplementedError


class RequestIdMiddleware(HttpMiddleware):
    """Give every request an id, visible in logs, error bodies and the response headers."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        sent = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = sent if _VALID_ID.match(sent) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["X-Request-ID"] = request_id
            await send(message)

        token = REQUEST_ID.set(request_id)  # on every log line of the request's work
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)


class AllowedHostsMiddleware(HttpMiddleware):
    """Answer only requests whose ``Host`` is allowed; others get the JSON error ``400``.

    The rule is Starlette's ``TrustedHostMiddleware``'s (exact names, ``*.example.org`` for
    sub-domains, ``*`` for any host); unlike it, the refusal keeps the service's error shape.
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        super().__init__(app)
        self.allow_any = "*" in allowed_hosts
        self.exact = {h.lower() for h in allowed_hosts if not h.startswith("*.")}
        self.suffixes = tuple(h[1:].lower() for h in allowed_hosts if h.startswith("*."))

    def allowed(self, host: str) -> bool:
        """Whether ``host`` (without its port) is one this service answers for."""
        host = host.lower()
        return self.allow_any or host in self.exact or host.endswith(self.suffixes)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        host = _host_name(Headers(scope=scope).get("host", ""))
        if self.allowed(host):
            await self.app(scope, receive, send)
            return
        refusal = error_response(
            Request(scope),
            400,
            "invalid-host",
            "the Host header names a host this service does not answer for",
            {"host": host[:100]},
        )
        await refusal(scope, receive, send)


def _host_name(host: str) -> str:
    """The name of a ``Host`` header without its port (``[::1]:8000`` is ``::1``)."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
