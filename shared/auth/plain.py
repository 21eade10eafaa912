"""The auth domain's records as JSON values: what the admin routes and ``mapsvc`` print."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

__all__ = ["plain"]


def plain(value: object) -> Any:
    """A dataclass of the auth domain as JSON values (times in ISO 8601, sets as lists)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)
        }
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value
