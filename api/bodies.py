"""Request bodies: a cap on the bytes read (``capped``), and the cap of small forms."""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import Message

from shared.errors import PayloadTooLargeError

__all__ = ["FORM_MAX_BYTES", "capped"]


#: the largest body of a login, token or admin request (a few short fields)
FORM_MAX_BYTES = 64 * 1024


def capped(request: Request, max_bytes: int, limit_name: str) -> Request:
    """``request`` with its body capped at ``max_bytes`` (a 413 ``PayloadTooLargeError``).

    Refused at once when ``Content-Length`` is over the cap, before a byte is read; else as
    soon as the bytes received (a chunked body, say) pass it, and nothing more is read.
    ``limit_name`` names the limit in the message (a setting, or what the body is).
    """

    def too_large() -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"the request body is larger than {max_bytes} bytes ({limit_name})",
            limit_bytes=max_bytes,
        )

    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise too_large()
    received = 0

    async def receive() -> Message:
        nonlocal received
        message = await request.receive()
        received += len(message.get("body", b""))
        if received > max_bytes:
            raise too_large()
        return message

    return Request(request.scope, receive)
