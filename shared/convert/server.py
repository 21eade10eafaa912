"""The Convert gRPC server: the ``pdfMerge`` servicer and ``serve()`` (``convert-server``)."""

from __future__ import annotations

import hmac
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

import grpc

from shared.auth.tokens import signing_keys, verify_access_token
from shared.convert._pb import convert_pb2, convert_pb2_grpc
from shared.convert.merge import merge_pdfs
from shared.convert.paths import read_work_pdf
from shared.convert.wire import (
    AUTHORIZATION_KEY,
    MAX_WORKERS,
    REQUEST_ID_KEY,
    bearer,
    message_options,
)
from shared.errors import (
    InvalidInputError,
    NotFoundError,
    PayloadTooLargeError,
    UnauthorizedError,
)
from shared.settings import Settings

__all__ = ["SHUTDOWN_GRACE_S", "CallStats", "ConvertServicer", "build_server", "serve"]

log = logging.getLogger("mapsvc.convert")

#: how long in-flight calls may go on after SIGTERM before they are cut
SHUTDOWN_GRACE_S = 25.0
DEFAULT_OUTPUT_NAME = "merged.pdf"
#: room for the response's other fields and framing next to the PDF bytes
_ENVELOPE_BYTES = 1024


@dataclass
class CallStats:
    """Counts of the server's calls: running now, most at once, done, cancelled."""

    active: int = 0
    peak: int = 0
    calls: int = 0
    cancelled: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextmanager
    def running(self) -> Iterator[None]:
        """Count one call while the block runs."""
        with self._lock:
            self.active += 1
            self.calls += 1
            self.peak = max(self.peak, self.active)
        try:
            yield
        finally:
            with self._lock:
                self.active -= 1

    def count_cancelled(self) -> None:
        """Count a call that the client cancelled."""
        with self._lock:
            self.cancelled += 1


class _CancelledError(Exception):
    def __init__(self, done: int) -> None:
        super().__init__(done)
        self.done = done


class ConvertServicer(convert_pb2_grpc.ConvertServicer):
    """``Convert.pdfMerge``: merges the request's PDFs with pypdf."""

    def __init__(
        self, settings: Settings, *, on_file: Callable[[int, str], None] | None = None
    ) -> None:
        """Serve with these settings.

        Args:
            settings: the work dir, access token, message and upload limits are taken from
                them.
            on_file: called with the index and name of each file before it is merged, in the
                worker thread (a hook for observing or slowing calls down).
        """
        self._work_dir = settings.work_dir
        token = settings.convert.token
        self._auth = bearer(token.get_secret_value()) if token is not None else None
        self._keys = signing_keys(settings)
        self._max_bytes = settings.convert.max_message_bytes
        self._max_file_bytes = settings.uploads.max_file_bytes
        self._max_total_bytes = settings.uploads.max_bytes
        self._on_file = on_file
        self.stats = CallStats()

    def _allowed(self, sent: str) -> bool:
        """Whether a call's ``authorization`` metadata lets it in.

        The service token (``MAPSVC_CONVERT_TOKEN``, what the API sends) or an access token of
        the HTTP API (a JWT of any role); with no service token configured, a call without
        credentials comes in too (the server binds to loopback by default).
        """
        if not sent:
            return self._auth is None
        if self._auth is not None and hmac.compare_digest(sent.encode(), self._auth.encode()):
            return True
        scheme, _, token = sent.partition(" ")
        if scheme.lower() != "bearer":
            return False
        try:
            verify_access_token(self._keys, token.strip())
        except UnauthorizedError:
            return False
        return True

    def pdfMerge(  # noqa: N802 - the spec's name of the operation
        self, request: convert_pb2.PdfMergeRequest, context: grpc.ServicerContext
    ) -> convert_pb2.PdfMergeResponse:
        """Merge ``request.files`` in order; the answer carries the PDF and its page count."""
        sent = dict(context.invocation_metadata())
        request_id = str(sent.get(REQUEST_ID_KEY, "-"))
        if not self._allowed(str(sent.get(AUTHORIZATION_KEY, ""))):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong access token")
        total = len(request.files)
        t0 = time.monotonic()
        with self.stats.running():
            try:
                merged = merge_pdfs(
                    self._inputs(request),
                    dict(request.metadata),
                    before_file=self._checkpoint(context),
                )
            except _CancelledError as exc:
                self.stats.count_cancelled()
                log.info("pdfMerge %s cancelled after %d of %d files", request_id, exc.done, total)
                context.abort(
                    grpc.StatusCode.CANCELLED,
                    f"pdfMerge cancelled by the client after {exc.done} of {total} files",
                )
            except PayloadTooLargeError as exc:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message)
            except NotFoundError as exc:
                context.abort(grpc.StatusCode.NOT_FOUND, exc.message)
            except InvalidInputError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, exc.message)
        if len(merged.data) + _ENVELOPE_BYTES > self._max_bytes:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the merged PDF ({len(merged.data)} bytes) is larger than the message limit"
                f" ({self._max_bytes} bytes)",
            )
        log.info(
            "pdfMerge %s: %d files, %d pages, %d bytes, %d ms",
            request_id,
            total,
            merged.page_count,
            len(merged.data),
            (time.monotonic() - t0) * 1000,
        )
        return convert_pb2.PdfMergeResponse(
            pdf=merged.data,
            page_count=merged.page_count,
            byte_size=len(merged.data),
            output_name=request.output_name or DEFAULT_OUTPUT_NAME,
        )

    def _inputs(self, request: convert_pb2.PdfMergeRequest) -> Iterator[tuple[str, bytes]]:
        # read one file at a time, so a path's bytes are loaded only when its turn comes,
        # and only once its size and header are checked
        total = 0
        for index, source in enumerate(request.files):
            kind = source.WhichOneof("source")
            if kind == "data":
                name, data = source.name or f"file {index + 1}", source.data
            elif kind == "path":
                name = source.name or source.path
                data = read_work_pdf(self._work_dir, source.path, self._max_file_bytes)
            else:
                raise InvalidInputError(f"file {index + 1} has neither data nor path")
            total += len(data)
            if total > self._max_total_bytes:
                raise PayloadTooLargeError(
                    f"the PDFs total more than {self._max_total_bytes} bytes"
                    " (MAPSVC_UPLOAD_MAX_BYTES)",
                    limit_bytes=self._max_total_bytes,
                )
            yield name, data

    def _checkpoint(self, context: grpc.ServicerContext) -> Callable[[int, str], None]:
        def before_file(index: int, name: str) -> None:
            if self._on_file is not None:
                self._on_file(index, name)
            if not context.is_active():
                raise _CancelledError(index)

        return before_file


def build_server(
    settings: Settings,
    port: int,
    *,
    host: str | None = None,
    servicer: ConvertServicer | None = None,
) -> tuple[grpc.Server, int]:
    """A Convert server, not started yet: plaintext, 10 workers, the message limits.

    At most ``10 + convert_max_pending`` calls are taken at once: 10 run, the others wait
    for a worker, and gRPC refuses any more with ``RESOURCE_EXHAUSTED``.

    Args:
        settings: the settings of the servicer, the message limit and the queue length.
        port: the port to listen on (0 picks a free one).
        host: the address to bind (``settings.convert.bind`` when None: loopback by default).
        servicer: the servicer to use (made from the settings when None).

    Returns:
        The server and the port it is bound to.
    """
    server = grpc.server(
        ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="convert"),
        options=message_options(settings.convert.max_message_bytes),
        maximum_concurrent_rpcs=MAX_WORKERS + settings.convert.max_pending,
    )
    convert_pb2_grpc.add_ConvertServicer_to_server(servicer or ConvertServicer(settings), server)
    bound = server.add_insecure_port(f"{_bind_host(host or settings.convert.bind)}:{port}")
    return server, bound


def _bind_host(host: str) -> str:
    """``host`` as it goes before ``:<port>``: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def serve(settings: Settings, port: int | None = None) -> int:
    """Run the Convert server until SIGTERM or SIGINT; in-flight calls are let finish.

    Args:
        settings: the settings to serve with.
        port: the port (``settings.convert.port`` when None).

    Returns:
        The process exit code.
    """
    server, bound = build_server(settings, settings.convert.port if port is None else port)
    server.start()
    log.info(
        "convert server listening on %s:%d (plaintext, %d workers, %d waiting at most,"
        " messages up to %d bytes)",
        _bind_host(settings.convert.bind),
        bound,
        MAX_WORKERS,
        settings.convert.max_pending,
        settings.convert.max_message_bytes,
    )

    def _stop(signum: int, frame: FrameType | None) -> None:
        log.info(
            "convert server stopping (%s): in-flight calls may finish", signal.strsignal(signum)
        )
        server.stop(SHUTDOWN_GRACE_S)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    server.wait_for_termination()
    log.info("convert server stopped")
    return 0
