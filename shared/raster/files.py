"""Writing files safely: a temporary name in the same folder, then an atomic rename."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "write_atomic"]


@contextlib.contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """A temporary path beside ``final``; renamed to it when the block ends without error.

    On an error (or a cancelled job) the temporary file is removed: nothing half-written ever
    has the final name.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        for leftover in (
            tmp,
            tmp.with_name(tmp.name + ".ovr"),
            tmp.with_name(tmp.name + ".aux.xml"),
        ):
            leftover.unlink(missing_ok=True)


def write_atomic(final: Path, data: str | bytes) -> int:
    """Write ``data`` to ``final`` atomically; returns the number of bytes."""
    raw = data.encode() if isinstance(data, str) else data
    with atomic_path(final) as tmp:
        tmp.write_bytes(raw)
    return len(raw)
