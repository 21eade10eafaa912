"""Documents that depend only on the deployment, built once per process and mount, sent as
bytes with an ``ETag`` (``304`` on ``If-None-Match``).

The OpenAPI document takes ~70 ms of CPU to build: built per request on the event loop, a dozen
anonymous callers asking for it made every other request wait seconds. It is built once, in a
thread (one build however many ask at once), and each answer is then a look-up.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

__all__ = ["Built", "Documents", "not_modified", "send"]


@dataclass(frozen=True)
class Built:
    """A document's bytes, their ``ETag`` and media type."""

    body: bytes
    etag: str
    media_type: str


class Documents:
    """The documents of a process, each built once by its key (its name and mount)."""

    def __init__(self) -> None:
        self._builds: dict[tuple[str, ...], asyncio.Future[Built]] = {}

    async def get(
        self, key: tuple[str, ...], build: Callable[[], Any], media_type: str = "application/json"
    ) -> Built:
        """The document of ``key``: ``build()`` (JSON-able) the first time, in a thread; a
        build that failed is tried again by the next request."""
        future = self._builds.get(key)
        if future is None or (future.done() and future.exception() is not None):
            future = self._builds[key] = asyncio.ensure_future(
                run_in_threadpool(_built, build, media_type)
            )
        # a request that goes away does not cancel the build the others wait for
        return await asyncio.shield(future)


def _built(build: Callable[[], Any], media_type: str) -> Built:
    """``build()`` as compact JSON (Starlette's ``JSONResponse``'s bytes) and its ``ETag``."""
    body = json.dumps(build(), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    return Built(body, f'"{hashlib.sha256(body).hexdigest()[:32]}"', media_type)


def not_modified(request: Request, etag: str) -> bool:
    """Whether ``request``'s ``If-None-Match`` names ``etag``."""
    return etag in {tag.strip() for tag in request.headers.get("if-none-match", "").split(",")}


def send(request: Request, built: Built, cache_control: str) -> Response:
    """``built`` with its ``ETag``; ``304`` when the request already has it."""
    headers = {"ETag": built.etag, "Cache-Control": cache_control}
    if not_modified(request, built.etag):
        return Response(status_code=304, headers=headers)
    return Response(built.body, media_type=built.media_type, headers=headers)
