"""The Convert client: found through ``convert_server_address``, async (grpc.aio), errors mapped.

``convert_client(settings)`` is None when the address is not configured (spec 4.17: the client
function is absent); callers answer "convert service not configured".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from shared.convert._pb import convert_pb2, convert_pb2_grpc
from shared.convert.wire import AUTHORIZATION_KEY, REQUEST_ID_KEY, bearer, message_options
from shared.errors import (
    InvalidInputError,
    MapsvcError,
    NotFoundError,
    PayloadTooLargeError,
    UnavailableError,
)
from shared.settings import Settings

__all__ = [
    "ConvertClient",
    "MergeResult",
    "PdfFile",
    "convert_client",
    "message_to_dict",
]

log = logging.getLogger("mapsvc.convert")

#: the details of grpc's RESOURCE_EXHAUSTED when a server takes no more concurrent calls
_BUSY_DETAILS = "Concurrent RPC limit exceeded!"


@dataclass(frozen=True)
class PdfFile:
    """One input PDF: its bytes, or its path relative to the work dir (exactly one)."""

    name: str = ""
    data: bytes | None = None
    path: str | None = None

    def to_proto(self) -> convert_pb2.PdfSource:
        """The message of this file."""
        if self.data is not None and self.path is None:
            return convert_pb2.PdfSource(name=self.name, data=self.data)
        if self.path is not None and self.data is None:
            return convert_pb2.PdfSource(name=self.name, path=self.path)
        raise ValueError("a PdfFile has either data or a path")


@dataclass(frozen=True)
class MergeResult:
    """What ``pdfMerge`` answered."""

    pdf: bytes
    page_count: int
    byte_size: int
    output_name: str


def message_to_dict(message: Message) -> dict[str, Any]:
    """A message as a dict, the way the spec's clients load them.

    Field names as written in the proto, 64-bit integers and enums as strings, fields left
    at their default filled in, and for each oneof that is set a key with the oneof's name
    whose value names the field that is set (``"source": "path"``).
    """
    out = MessageToDict(
        message,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
        use_integers_for_enums=False,
    )
    _add_oneofs(message, out)
    return out


def _add_oneofs(message: Message, out: dict[str, Any]) -> None:
    for oneof in message.DESCRIPTOR.oneofs:
        which = message.WhichOneof(oneof.name)
        if which is not None:
            out[oneof.name] = which
    for fd in message.DESCRIPTOR.fields:
        if fd.message_type is None or fd.message_type.GetOptions().map_entry:
            continue
        value = getattr(message, fd.name)
        if fd.is_repeated:
            for item, item_out in zip(value, out.get(fd.name, []), strict=True):
                _add_oneofs(item, item_out)
        elif message.HasField(fd.name):
            _add_oneofs(value, out[fd.name])


class ConvertClient:
    """An async client of one Convert server; one channel, kept open until ``close()``."""

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        max_message_bytes: int = 536870912,
        timeout_s: float | None = None,
    ) -> None:
        """Open a plaintext channel to ``address`` (``ip:port``); it connects on first use.

        Args:
            address: the server's ``ip:port``.
            token: the access token sent with each call, if any.
            max_message_bytes: the largest message sent or received.
            timeout_s: the deadline of each call (None: no deadline).
        """
        self.address = address
        self._token = token
        self._timeout_s = timeout_s
        self._channel = grpc.aio.insecure_channel(
            address, options=message_options(max_message_bytes)
        )
        self._stub = convert_pb2_grpc.ConvertStub(self._channel)

    async def pdf_merge_message(
        self, request: convert_pb2.PdfMergeRequest, *, request_id: str | None = None
    ) -> convert_pb2.PdfMergeResponse:
        """Call ``pdfMerge`` with a request message; the raw response message.

        Raises:
            grpc.aio.AioRpcError: the call failed (not mapped).
        """
        metadata: list[tuple[str, str]] = []
        if request_id:
            metadata.append((REQUEST_ID_KEY, request_id))
        if self._token:
            metadata.append((AUTHORIZATION_KEY, bearer(self._token)))
        return await self._stub.pdfMerge(request, metadata=metadata, timeout=self._timeout_s)

    async def pdf_merge(
        self,
        files: Sequence[PdfFile],
        *,
        output_name: str = "",
        metadata: Mapping[str, str] | None = None,
        request_id: str | None = None,
    ) -> MergeResult:
        """Merge ``files`` in order into one PDF.

        Args:
            files: the PDFs, each as bytes or as a path inside the server's work dir.
            output_name: file name of the result (the server's default when empty).
            metadata: document information of the result, e.g. ``{"Title": "…"}``.
            request_id: sent as ``x-request-id`` metadata, to follow the call in logs.

        Returns:
            The merged PDF, its page count and size.

        Raises:
            InvalidInputError: a file is not a readable PDF or is encrypted.
            PayloadTooLargeError: the request or the merged PDF is larger than the message
                limit, a file or all files together are over the server's upload limits.
            NotFoundError: a path names no file.
            UnavailableError: the server cannot be reached, is busy (all its workers and
                waiting places taken), or refused the access token.
            MapsvcError: any other failure of the call.
        """
        request = convert_pb2.PdfMergeRequest(
            files=[f.to_proto() for f in files],
            output_name=output_name,
            metadata=dict(metadata or {}),
        )
        try:
            response = await self.pdf_merge_message(request, request_id=request_id)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from exc
        return MergeResult(
            pdf=response.pdf,
            page_count=response.page_count,
            byte_size=response.byte_size,
            output_name=response.output_name,
        )

    def _error(self, exc: grpc.aio.AioRpcError) -> MapsvcError:
        code = exc.code()
        details = exc.details() or code.name
        detail = {"service": "convert", "grpc_status": code.name}
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidInputError(details, **detail)
        if code == grpc.StatusCode.NOT_FOUND:
            return NotFoundError(details, **detail)
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and details == _BUSY_DETAILS:
            log.warning("convert service at %s is busy: %s", self.address, details)
            return UnavailableError("convert service busy; try again later", **detail)
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return PayloadTooLargeError(
                f"the PDFs are too large for the convert service: {details}", **detail
            )
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            log.warning("convert service at %s: %s: %s", self.address, code.name, details)
            return UnavailableError("convert service unreachable; try again later", **detail)
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            log.error("convert service at %s refused our access token: %s", self.address, details)
            return UnavailableError("convert service refused the access token", **detail)
        log.error("convert service at %s: %s: %s", self.address, code.name, details)
        return MapsvcError(f"convert service failed: {details}", **detail)

    async def close(self) -> None:
        """Close the channel (calls still running are cancelled)."""
        await self._channel.close()

    async def __aenter__(self) -> ConvertClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def convert_client(settings: Settings) -> ConvertClient | None:
    """The client of the Convert service, or None when ``convert_server_address`` is unset.

    Call it where an event loop runs (the channel belongs to it), e.g. in the API's lifespan.
    """
    address = settings.convert.server_address
    if address is None:
        return None
    token = settings.convert.token
    return ConvertClient(
        address,
        token=token.get_secret_value() if token is not None else None,
        max_message_bytes=settings.convert.max_message_bytes,
        timeout_s=settings.convert.timeout_s,
    )
