"""The HTTP protocol uvicorn serves the API with: httptools, with Nagle's algorithm off.

``uvicorn --workers N`` binds the listening socket itself with ``proto`` 0, and asyncio turns
``TCP_NODELAY`` on only for sockets that say ``IPPROTO_TCP`` (uvicorn issue 3149): every answer
on a kept-alive connection after the first then waits ~40 ms for the client's delayed ACK
(written as head, then body). Each accepted connection sets it here instead.
"""

from __future__ import annotations

import asyncio
import socket

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["NoDelayHttpToolsProtocol"]


class NoDelayHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that sends each write at once (``TCP_NODELAY``)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Turn ``TCP_NODELAY`` on for a TCP connection, then uvicorn's own set-up."""
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
