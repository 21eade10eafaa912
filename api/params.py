"""Reading query parameters: flags and bounded integers, with 400s that name the parameter."""

from __future__ import annotations

from starlette.requests import Request

from shared.errors import InvalidInputError

__all__ = ["flag", "int_param"]

_TRUE = {"1", "true", "yes"}
_FALSE = {"0", "false", "no", ""}


def flag(request: Request, name: str) -> bool:
    """A flag parameter (spec 4.0: ``1`` or ``0``; ``true``/``false`` are taken too)."""
    value = request.query_params.get(name, "0").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidInputError(f"{name} must be 1 or 0", parameter=name, value=value)


def int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    """An integer parameter within ``lo..hi``, or its default when absent."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInputError(f"{name} must be an integer", parameter=name, value=raw) from None
    if not lo <= value <= hi:
        raise InvalidInputError(f"{name} must be {lo}..{hi}", parameter=name, value=value)
    return value
