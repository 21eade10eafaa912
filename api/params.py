"""Reading query parameters: one function per kind, with 400s that name the parameter.

Flags, integers, numbers, languages, CRSs and boxes are read here and nowhere else; the rules
themselves live in :mod:`shared.params` (and tile addresses in :mod:`shared.tiles.grid`).
"""

from __future__ import annotations

import math

from starlette.requests import Request
from starlette.types import Message

from api.services import services
from shared.errors import InvalidInputError, PayloadTooLargeError
from shared.params import Bbox, parse_bbox, parse_lang, parse_srs

__all__ = [
    "bbox_param",
    "FORM_MAX_BYTES",
    "capped",
    "flag",
    "int_param",
    "lang_param",
    "number",
    "srs_param",
    "text_param",
]

_TRUE = {"1", "true", "yes"}
_FALSE = {"0", "false", "no", ""}


def flag(request: Request, name: str) -> bool:
    """A flag parameter (spec 4.0: ``1`` or ``0``; ``true``/``false`` are taken too)."""
    value = request.query_params.get(name, "0").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidInputError(f"{name} must be 1 or 0", parameter=name, value=value[:32])


def int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    """An integer parameter within ``lo..hi``, or its default when absent."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:  # also more than 4300 digits
        raise InvalidInputError(
            f"{name} must be an integer", parameter=name, value=raw[:32]
        ) from None
    if not lo <= value <= hi:
        raise InvalidInputError(f"{name} must be {lo}..{hi}", parameter=name, value=value)
    return value


def text_param(request: Request, name: str, max_chars: int) -> str | None:
    """The text of query parameter ``name`` (None when absent or empty).

    Raises:
        InvalidInputError: longer than ``max_chars``.
    """
    value = request.query_params.get(name) or None
    if value is not None and len(value) > max_chars:
        raise InvalidInputError(
            f"{name} is at most {max_chars} characters", parameter=name, value=value[:64]
        )
    return value


def number(request: Request, name: str, lo: float, hi: float) -> float:
    """A required finite number within ``lo..hi``."""
    raw = request.query_params.get(name)
    if raw is None or not raw.strip():
        raise InvalidInputError(f"{name} is required", parameter=name)
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInputError(
            f"{name} must be a number", parameter=name, value=raw[:32]
        ) from None
    if not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidInputError(f"{name} must be {lo:g}..{hi:g}", parameter=name, value=raw[:32])
    return value


def lang_param(request: Request, given: str | None = None) -> str:
    """The label language: ``given`` (a path's), else ``lang``, else the default language."""
    settings = services(request).settings
    text = given or request.query_params.get("lang") or settings.default_lang
    return parse_lang(text, settings.languages)


def srs_param(
    request: Request, names: tuple[str, ...] = ("srs", "crs"), default: str = "EPSG:3857"
) -> str:
    """The CRS of the first of ``names`` given, as an authority code (``EPSG:3857``)."""
    for name in names:
        if raw := request.query_params.get(name):
            return parse_srs(raw, name)
    return default


def bbox_param(request: Request, names: tuple[str, ...], srs: str = "EPSG:4326") -> Bbox | None:
    """The box of the first of ``names`` given (in ``srs``), or None when none is."""
    for name in names:
        raw = request.query_params.get(name)
        if raw is not None and raw.strip():
            return parse_bbox(raw, name, srs)
    return None


#: the largest body of a login, token or admin request (a few short fields)
FORM_MAX_BYTES = 64 * 1024


def capped(request: Request, max_bytes: int, limit_name: str) -> Request:
    """``request`` with its body capped at ``max_bytes`` (a 413 ``PayloadTooLargeError``).

    Refused at once when ``Content-Length`` is over the cap, before a byte is read; else as
    soon as the bytes received (a chunked body, say) pass it, and nothing more is read.
    ``limit_name`` names the limit in the message (a setting, or what the body is).
    """

    def too_large() -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"the request body is larger than {max_bytes} bytes ({limit_name})",
            limit_bytes=max_bytes,
        )

    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise too_large()
    received = 0

    async def receive() -> Message:
        nonlocal received
        message = await request.receive()
        received += len(message.get("body", b""))
        if received > max_bytes:
            raise too_large()
        return message

    return Request(request.scope, receive)
