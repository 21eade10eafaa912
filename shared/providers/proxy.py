"""The URL proxy (``gis-url-proxy``): fetch an allowed http(s) URL for a client, safely.

Safe by construction:

- only ``http``/``https`` URLs without user info, whose host is on the allowlist;
- every request (the first, each redirect's) goes through :class:`GuardedTransport`, which
  resolves the host itself, refuses it when *any* of its addresses is not public (private,
  loopback, link-local with the cloud metadata address, shared, multicast, reserved,
  unspecified; IPv4-mapped IPv6 too) and sends the request to the address it checked (the
  name stays in ``Host`` and, for https, in the TLS server name the certificate is checked
  against): a DNS answer that changes between check and connect cannot slip through;
- redirects are followed by hand, each target checked like the first URL;
- the body is streamed with a size cap and the whole fetch with a time cap;
- only answers of an allowed media type are relayed (images, JSON, XML, vector tiles, plain
  text by default); HTML and JavaScript never, whatever the settings say;
- only a few request headers are sent (never the client's cookies or credentials), and
  hop-by-hop (those the answer's ``Connection`` names too), credential, CORS (ours to set) and
  ``X-Accel-*`` headers of the answer are dropped: nginx before the API would act on those (an
  internal redirect with the caller's credentials, its buffering, its rate).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

import httpx

from shared.errors import (
    ForbiddenError,
    InvalidInputError,
    UpstreamBadAnswerError,
    UpstreamError,
)
from shared.providers.upstream import USER_AGENT, upstream_error
from shared.settings import Settings

__all__ = [
    "GuardedTransport",
    "ProxiedResponse",
    "ProxyPolicy",
    "fetch",
    "make_proxy_client",
]

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
}
_CREDENTIALS = {"set-cookie", "set-cookie2", "cookie", "authorization", "www-authenticate"}
#: answer headers dropped by prefix: CORS (ours to set), nginx's (the front would act on them)
_DROPPED_PREFIXES = ("access-control-", "x-accel-")
#: request headers of the client passed on (nothing that identifies or authenticates it)
_FORWARDED = ("accept", "accept-language", "if-none-match", "if-modified-since", "range")
_REDIRECTS = {301, 302, 303, 307, 308}
#: answers without a body, relayed whatever their media type
_BODYLESS = {204, 304}
#: media types a browser runs as a page or a script: never served from our origin
_NEVER_RELAYED = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "text/javascript",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "text/ecmascript",
    }
)


@dataclass(frozen=True)
class ProxyPolicy:
    """What the proxy may fetch and relay, and to which origins (CORS)."""

    allow_hosts: frozenset[str]
    trusted: frozenset[tuple[str, int]] = frozenset()
    max_bytes: int = 20 * 1024 * 1024
    timeout_s: float = 30.0
    max_redirects: int = 5
    #: media types relayed: ``type/sub``, ``type/*``, ``type/*+suffix``
    content_types: frozenset[str] = frozenset()
    #: origins a browser may read answers from; ``*`` any
    cors_origins: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: Settings) -> ProxyPolicy:
        """The policy of ``MAPSVC_PROXY_*``."""
        trusted = set()
        for entry in settings.proxy.trusted_addresses:
            host, _, port = entry.rpartition(":")
            host = host.strip("[]")
            try:
                ipaddress.ip_address(host)  # an address, not a name
                trusted.add((host, int(port)))
            except ValueError:
                raise ValueError(
                    f"MAPSVC_PROXY_TRUSTED_ADDRESSES: {entry!r} is not <ip>:<port>"
                ) from None
        return cls(
            allow_hosts=frozenset(h.lower().rstrip(".") for h in settings.proxy.allow_hosts),
            trusted=frozenset(trusted),
            max_bytes=settings.proxy.max_bytes,
            timeout_s=settings.proxy.timeout_s,
            max_redirects=settings.proxy.max_redirects,
            content_types=frozenset(t.lower() for t in settings.proxy.content_types),
            cors_origins=frozenset(o.rstrip("/") for o in settings.proxy.cors_origins),
        )

    def host_allowed(self, host: str) -> bool:
        """Whether ``host`` (a name or an address) is on the allowlist (``*.x.org`` too)."""
        host = host.lower().rstrip(".")
        if host in self.allow_hosts:
            return True
        return any(
            entry.startswith("*.") and host.endswith(entry[1:]) for entry in self.allow_hosts
        )

    def type_allowed(self, content_type: str | None) -> bool:
        """Whether an answer of this ``Content-Type`` is relayed (none: not relayed)."""
        media = _media_type(content_type)
        if not media or media in _NEVER_RELAYED:
            return False
        kind, _, sub = media.partition("/")
        patterns = {media, f"{kind}/*"}
        if "+" in sub:
            patterns.add(f"{kind}/*+{sub.rpartition('+')[2]}")
        return not patterns.isdisjoint(self.content_types)

    def cors_origin(self, origin: str | None) -> str | None:
        """The ``Access-Control-Allow-Origin`` of an answer to ``origin``; None: send none."""
        if "*" in self.cors_origins:
            return "*"
        return origin if origin is not None and origin in self.cors_origins else None


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";")[0].strip().lower()


def address_is_public(address: str) -> bool:
    """Whether an IP address is one the proxy may connect to."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_unspecified)


class GuardedTransport(httpx.AsyncBaseTransport):
    """A transport that sends requests only to public addresses (or trusted ``ip:port``).

    Each request goes to the address checked here, never to a name, so no connection resolves
    a name again. Each host name has its own inner transport (its own connections): a TLS
    connection whose certificate was checked for one name never carries another name's
    requests, even when both resolve to the same address. The ``names`` most recently used
    are kept; the inner transport of an older one is closed (an answer it still streams is
    cut short).

    Args:
        make_inner: makes the inner transport of a name (it is given addresses, never names).
        trusted: ``(ip, port)`` pairs reached although not public.
        names: how many names keep their inner transport.
    """

    def __init__(
        self,
        make_inner: Callable[[], httpx.AsyncBaseTransport],
        trusted: Iterable[tuple[str, int]] = (),
        names: int = 64,
    ) -> None:
        self._make_inner = make_inner
        self._trusted = frozenset(trusted)
        self._names = names
        self._inner: OrderedDict[str, httpx.AsyncBaseTransport] = OrderedDict()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Resolve the request's host, check every address, send to a checked one."""
        url = request.url
        host = url.raw_host.decode("ascii")
        port = url.port or (443 if url.scheme == "https" else 80)
        address = await self._checked_address(request, host, port)
        extensions = dict(request.extensions)
        if url.scheme == "https":
            extensions["sni_hostname"] = host  # TLS and its certificate check: the name
        # the Host header httpx derived from the URL keeps the name
        pinned = httpx.Request(
            request.method,
            url.copy_with(host=address),
            headers=request.headers,
            stream=request.stream,
            extensions=extensions,
        )
        return await (await self._inner_for(host)).handle_async_request(pinned)

    async def _inner_for(self, host: str) -> httpx.AsyncBaseTransport:
        inner = self._inner.get(host)
        if inner is None:
            inner = self._inner[host] = self._make_inner()
            if len(self._inner) > self._names:
                await self._inner.popitem(last=False)[1].aclose()
        self._inner.move_to_end(host)
        return inner

    async def _checked_address(self, request: httpx.Request, host: str, port: int) -> str:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except socket.gaierror as exc:
            raise httpx.ConnectError(f"{host} does not resolve: {exc}", request=request) from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        refused = [
            a for a in addresses if (a, port) not in self._trusted and not address_is_public(a)
        ]
        if refused or not addresses:
            raise ForbiddenError(
                f"the proxy does not connect to {host}: it resolves to a non-public address",
                parameter="url",
                host=host,
            )
        return addresses[0]

    async def aclose(self) -> None:
        """Close every inner transport and its connections."""
        while self._inner:
            await self._inner.popitem()[1].aclose()


def make_proxy_client(settings: Settings) -> httpx.AsyncClient:
    """The client of the proxy: every request through :class:`GuardedTransport`.

    Args:
        settings: the proxy settings (trusted addresses, time cap) and connection limits
            (``provider_max_connections`` per host name).

    Returns:
        A client to close with ``aclose()``.
    """
    policy = ProxyPolicy.from_settings(settings)
    limits = httpx.Limits(
        max_connections=settings.providers.max_connections,
        max_keepalive_connections=min(20, settings.providers.max_connections),
    )
    return httpx.AsyncClient(
        transport=GuardedTransport(
            lambda: httpx.AsyncHTTPTransport(retries=0, limits=limits), policy.trusted
        ),
        timeout=httpx.Timeout(
            settings.proxy.timeout_s, connect=settings.providers.connect_timeout_s
        ),
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": USER_AGENT},
    )


@dataclass
class ProxiedResponse:
    """The fetched answer: status, the headers passed on, its body as a stream, and a close."""

    status: int
    headers: dict[str, str]
    body: AsyncIterator[bytes]
    aclose: Callable[[], Awaitable[None]]


def _check_url(raw: str, policy: ProxyPolicy) -> httpx.URL:
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, ValueError, TypeError):
        raise InvalidInputError("url is not a valid URL", parameter="url") from None
    if url.scheme not in ("http", "https"):
        raise ForbiddenError(
            "the proxy fetches http and https URLs only", parameter="url", scheme=url.scheme
        )
    if not url.host:
        raise InvalidInputError("url has no host", parameter="url")
    if url.userinfo:
        raise ForbiddenError("the proxy does not send credentials in URLs", parameter="url")
    if not policy.host_allowed(url.host):
        raise ForbiddenError(
            f"host {url.host} is not allowed (MAPSVC_PROXY_ALLOW_HOSTS)",
            parameter="url",
            host=url.host,
        )
    return url


async def fetch(
    client: httpx.AsyncClient,
    policy: ProxyPolicy,
    raw_url: str,
    request_headers: Mapping[str, str],
) -> ProxiedResponse:
    """Fetch ``raw_url`` for a client.

    Args:
        client: the client of :func:`make_proxy_client`.
        policy: what may be fetched.
        raw_url: the URL the client asked for.
        request_headers: the client's headers (only a few harmless ones are passed on).

    Returns:
        The answer; its body stream must be consumed or closed.

    Raises:
        ForbiddenError: the URL, a redirect target or an address is not allowed.
        UpstreamError: the fetch failed, took too long, or the body is too large.
    """
    deadline = time.monotonic() + policy.timeout_s
    url = _check_url(raw_url, policy)
    headers = {k: v for k, v in request_headers.items() if k.lower() in _FORWARDED}
    for _ in range(policy.max_redirects + 1):
        response = await _send(client, url, headers, deadline)
        if response.status_code not in _REDIRECTS or "location" not in response.headers:
            return await _relay(response, policy, deadline)
        location = response.headers["location"]
        await response.aclose()
        url = _check_url(str(url.join(location)), policy)
    raise UpstreamError(
        f"more than {policy.max_redirects} redirects", provider="proxy", url=str(url)
    )


async def _send(
    client: httpx.AsyncClient, url: httpx.URL, headers: dict[str, str], deadline: float
) -> httpx.Response:
    request = client.build_request("GET", url, headers=headers)
    try:
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            return await client.send(request, stream=True)
    except TimeoutError as exc:
        raise upstream_error("proxy", httpx.ReadTimeout("proxy time limit")) from exc
    except httpx.HTTPError as exc:
        raise upstream_error("proxy", exc) from exc


async def _relay(response: httpx.Response, policy: ProxyPolicy, deadline: float) -> ProxiedResponse:
    if response.status_code >= 500:
        status = response.status_code
        await response.aclose()
        raise UpstreamError(
            f"the proxied URL failed (HTTP {status})", provider="proxy", status=status
        )
    length = response.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > policy.max_bytes:
        await response.aclose()
        raise UpstreamError(
            f"the proxied answer is larger than {policy.max_bytes} bytes",
            provider="proxy",
            max_bytes=policy.max_bytes,
        )
    content_type = response.headers.get("content-type")
    if response.status_code not in _BODYLESS and not policy.type_allowed(content_type):
        await response.aclose()
        raise UpstreamBadAnswerError(
            f"the proxy does not relay {_media_type(content_type) or 'an untyped answer'}"
            " (MAPSVC_PROXY_CONTENT_TYPES)",
            provider="proxy",
            status=response.status_code,
            content_type=content_type or "",
        )
    return ProxiedResponse(
        response.status_code,
        _relayed_headers(response.headers),
        _stream(response, policy, deadline),
        response.aclose,
    )


def _relayed_headers(headers: httpx.Headers) -> dict[str, str]:
    """The headers of an upstream's answer passed on to the client: none that is hop-by-hop
    (the fixed ones and those its ``Connection`` names), a credential, CORS or ``X-Accel-*``."""
    named = {name.strip().lower() for name in headers.get_list("connection", split_commas=True)}
    dropped = _HOP_BY_HOP | _CREDENTIALS | named
    return {
        k: v for k, v in headers.items() if k not in dropped and not k.startswith(_DROPPED_PREFIXES)
    }


async def _stream(
    response: httpx.Response, policy: ProxyPolicy, deadline: float
) -> AsyncIterator[bytes]:
    seen = 0
    try:
        async for chunk in response.aiter_raw():
            seen += len(chunk)
            if seen > policy.max_bytes or time.monotonic() > deadline:
                # the status is sent already: cut the answer short, the client sees it broken
                raise UpstreamError("the proxied answer is too large or too slow", provider="proxy")
            yield chunk
    except httpx.HTTPError as exc:
        raise upstream_error("proxy", exc) from exc
    finally:
        await response.aclose()
