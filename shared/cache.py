"""JSON results cached in Redis, keyed by what they depend on (file sizes and mtimes, say)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import redis

__all__ = ["cached_json", "file_signature"]


def file_signature(paths: Iterable[Path]) -> list[tuple[str, int, int]]:
    """Name, size and mtime (ns) of each path: any change to a file changes its signature."""
    signature = []
    for path in paths:
        st = os.stat(path)
        signature.append((str(path), st.st_size, st.st_mtime_ns))
    return signature


def cached_json(
    client: redis.Redis,
    kind: str,
    depends_on: Any,
    compute: Callable[[], Any],
    *,
    ttl_s: int,
    refresh: bool = False,
) -> Any:
    """The cached value for ``depends_on``, or ``compute()`` stored for next time.

    Args:
        client: a Redis client that decodes responses.
        kind: what is cached (part of the key, e.g. ``raster-info``).
        depends_on: JSON-able inputs; a change in any gives another key.
        compute: makes the value (JSON-able) on a miss.
        ttl_s: how long a value is kept.
        refresh: compute and store again even on a hit (``nocache=1``).

    Returns:
        The value.
    """
    digest = hashlib.sha256(json.dumps(depends_on, sort_keys=True, default=str).encode())
    key = f"mapsvc:cache:{kind}:{digest.hexdigest()}"
    if not refresh:
        hit = client.get(key)
        if hit is not None:
            return json.loads(str(hit))
    value = compute()
    client.set(key, json.dumps(value), ex=ttl_s)
    return value
