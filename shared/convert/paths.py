"""Input files named by a path: resolved strictly inside the work dir, checked, or refused."""

from __future__ import annotations

import os
from pathlib import Path

from shared.convert.merge import HEADER_WINDOW, looks_like_pdf
from shared.errors import InvalidInputError, PayloadTooLargeError
from shared.paths import resolve_inside

__all__ = ["read_work_pdf", "work_file", "work_pdf"]


def work_file(work_dir: Path, rel_path: str) -> Path:
    """The file ``rel_path`` names inside ``work_dir``; never one outside it.

    Args:
        work_dir: the root every path stays in.
        rel_path: a path relative to it, with ``/`` separators.

    Returns:
        The resolved path of an existing regular file.

    Raises:
        InvalidInputError: the path is empty or absolute, has ``..``, leads outside the work
            dir (through a symlink too), or is not a regular file.
        NotFoundError: nothing exists at the path.
    """
    if not rel_path.strip():
        raise InvalidInputError("a path must name a file of the work dir", path=rel_path)
    path = resolve_inside(work_dir, rel_path, root_name="work dir")
    if not path.is_file():
        raise InvalidInputError(f"{rel_path!r} is not a file", path=rel_path)
    return path


def work_pdf(work_dir: Path, rel_path: str, max_bytes: int) -> Path:
    """The PDF ``rel_path`` names inside ``work_dir``, checked without reading it whole.

    Only its size and its first kilobyte (the ``%PDF-`` header) are looked at.

    Args:
        work_dir: the root every path stays in.
        rel_path: a path relative to it, with ``/`` separators.
        max_bytes: the largest file taken.

    Returns:
        The resolved path.

    Raises:
        InvalidInputError: as :func:`work_file`, or the file does not start like a PDF.
        PayloadTooLargeError: the file is a PDF larger than ``max_bytes``.
        NotFoundError: nothing exists at the path.
    """
    path = work_file(work_dir, rel_path)
    with path.open("rb") as file:
        if not looks_like_pdf(file.read(HEADER_WINDOW)):
            raise InvalidInputError(f"{rel_path} is not a PDF", path=rel_path)
        size = os.fstat(file.fileno()).st_size
    if size > max_bytes:
        raise _too_large(rel_path, max_bytes)
    return path


def read_work_pdf(work_dir: Path, rel_path: str, max_bytes: int) -> bytes:
    """The bytes of the PDF ``rel_path`` names, checked first as by :func:`work_pdf`.

    Never more than ``max_bytes`` are read, even from a file that grew since the check.

    Raises:
        InvalidInputError: as :func:`work_pdf`.
        PayloadTooLargeError: the file is larger than ``max_bytes``.
        NotFoundError: nothing exists at the path.
    """
    path = work_pdf(work_dir, rel_path, max_bytes)
    with path.open("rb") as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _too_large(rel_path, max_bytes)
    return data


def _too_large(rel_path: str, max_bytes: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"{rel_path} is larger than {max_bytes} bytes (MAPSVC_UPLOAD_MAX_FILE_BYTES)",
        path=rel_path,
        limit_bytes=max_bytes,
    )
