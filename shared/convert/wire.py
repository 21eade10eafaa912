"""What the Convert server and its clients agree on besides the proto: limits and metadata."""

from __future__ import annotations

__all__ = [
    "AUTHORIZATION_KEY",
    "MAX_WORKERS",
    "REQUEST_ID_KEY",
    "bearer",
    "message_options",
]

#: concurrent calls the server runs (spec 4.17); more wait for a free worker
MAX_WORKERS = 10
#: request metadata: the id of the HTTP request (or the caller's own) that led to the call
REQUEST_ID_KEY = "x-request-id"
#: request metadata: ``Bearer <token>`` when an access token is configured
AUTHORIZATION_KEY = "authorization"


def message_options(max_message_bytes: int) -> list[tuple[str, int]]:
    """Channel and server options for the largest message each way."""
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


def bearer(token: str) -> str:
    """The value of the ``authorization`` metadata for ``token``."""
    return f"Bearer {token}"
