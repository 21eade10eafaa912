"""Merging PDFs with pypdf: pure logic, no gRPC, no HTTP."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pypdf import PasswordType, PdfReader, PdfWriter
from pypdf.errors import DependencyError, PyPdfError

from shared.errors import InvalidInputError

__all__ = ["HEADER_WINDOW", "MAX_FILES", "MergedPdf", "looks_like_pdf", "merge_pdfs"]

#: most files in one merge
MAX_FILES = 1000

log = logging.getLogger("mapsvc.convert")

#: a PDF may carry a little junk before its header; readers look this far for it
HEADER_WINDOW = 1024
_INFO_KEY = re.compile(r"^/?[A-Za-z][A-Za-z0-9]{0,63}$")


@dataclass(frozen=True)
class MergedPdf:
    """The result of a merge: the PDF's bytes and its page count."""

    data: bytes
    page_count: int


def looks_like_pdf(data: bytes) -> bool:
    """Whether ``data`` starts like a PDF (``%PDF-`` within its first kilobyte)."""
    return b"%PDF-" in data[:HEADER_WINDOW]


def merge_pdfs(
    files: Iterable[tuple[str, bytes]],
    metadata: Mapping[str, str] | None = None,
    before_file: Callable[[int, str], None] | None = None,
) -> MergedPdf:
    """Merge PDFs, in the order given, into one.

    A PDF protected by an owner password only (one that opens without a password) is taken;
    one that needs a password to open is refused.

    Args:
        files: ``(name, bytes)`` of each PDF; the name is used in error messages. A lazy
            iterable is read one file at a time.
        metadata: document information of the result, e.g. ``{"Title": "…"}`` (a leading
            ``/`` is optional).
        before_file: called with the index and name of each file before it is read; it may
            raise to stop the merge (cancellation).

    Returns:
        The merged PDF.

    Raises:
        InvalidInputError: no file, a file that is not a readable PDF, an encrypted one, or
            a metadata key that is not a PDF name.
    """
    writer = PdfWriter()
    info = _info(metadata or {})
    count = 0
    for index, (name, data) in enumerate(files):
        if before_file is not None:
            before_file(index, name)
        _append(writer, name, data)
        count += 1
    if count == 0:
        raise InvalidInputError("no PDF to merge", parameter="files")
    if info:
        writer.add_metadata(info)
    out = io.BytesIO()
    writer.write(out)
    return MergedPdf(out.getvalue(), len(writer.pages))


def _info(metadata: Mapping[str, str]) -> dict[str, str]:
    info = {}
    for key, value in metadata.items():
        if not _INFO_KEY.match(key):
            raise InvalidInputError(
                f"metadata key {key!r} is not a PDF name (letters and digits)",
                parameter="metadata",
            )
        info[key if key.startswith("/") else f"/{key}"] = value
    return info


def _append(writer: PdfWriter, name: str, data: bytes) -> None:
    if not looks_like_pdf(data):
        raise InvalidInputError(f"{name} is not a PDF", file=name)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not _opens_without_password(reader):
            raise InvalidInputError(
                f"{name} is encrypted: remove its password before merging", file=name
            )
        writer.append(reader)
    except InvalidInputError:
        raise
    # pypdf reports broken files with its own errors, and at times with plain ones
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        log.info("unreadable PDF %s: %s: %s", name, type(exc).__name__, exc)
        raise InvalidInputError(f"{name} is not a readable PDF: {exc}", file=name) from None


def _opens_without_password(reader: PdfReader) -> bool:
    try:
        opened: PasswordType = reader.decrypt("")
        return opened != PasswordType.NOT_DECRYPTED
    except DependencyError:  # AES without the optional crypto package: treat as locked
        return False
