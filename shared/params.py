"""Parameters given as text, parsed by one function each so one rule holds everywhere.

The API's parameter types (``api/fields.py``) parse with them; the CLI and the domain use the
same functions. Each refuses bad text with :class:`~shared.errors.InvalidInputError` naming the
parameter.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import UTC, datetime

from pyproj import CRS, Transformer
from pyproj.exceptions import CRSError

from shared.errors import InvalidInputError
from shared.settings import LANG_PATTERN

__all__ = [
    "BOX_PATTERN",
    "PAIR_PATTERN",
    "SRS_PATTERN",
    "Bbox",
    "box_numbers",
    "crs_valid_area",
    "parse_bbox",
    "parse_lang",
    "parse_srs",
    "parse_time_or_age",
]

Bbox = tuple[float, float, float, float]

#: A CRS by authority code, either case (``EPSG:3857``, ``esri:102100``).
SRS_PATTERN = r"^([Ee][Pp][Ss][Gg]|[Ee][Ss][Rr][Ii]):([0-9]{1,6})$"
_SRS = re.compile(SRS_PATTERN)
_NUMBER = r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?"
#: A box as text: ``minx,miny,maxx,maxy`` (what :func:`box_numbers` reads).
BOX_PATTERN = rf"^{_NUMBER},{_NUMBER},{_NUMBER},{_NUMBER}$"
#: An age: a whole number and a unit, ``s``, ``m``, ``h``, ``d`` or ``w`` (``7d``, ``12h``).
AGE_PATTERN = r"^([0-9]{1,9})([smhdw])$"
_AGE = re.compile(AGE_PATTERN)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: A pair of numbers as text: ``x,y``.
PAIR_PATTERN = rf"{_NUMBER},{_NUMBER}"
_LANG = re.compile(LANG_PATTERN)
_WGS84 = "EPSG:4326"
#: A projected CRS is valid a little past its area of use: this share of the area's span.
_MARGIN = 0.1


def parse_lang(text: str, allowed: frozenset[str], parameter: str = "lang") -> str:
    """A label language from ``allowed`` (``MAPSVC_LANGUAGES``).

    Raises:
        InvalidInputError: not a language tag, or not one the service serves.
    """
    if not _LANG.match(text):
        raise InvalidInputError(
            "lang must be a language tag such as en or pt-BR", parameter=parameter, lang=text[:32]
        )
    if text not in allowed:
        raise InvalidInputError(
            f"lang must be one of {','.join(sorted(allowed))}", parameter=parameter, lang=text
        )
    return text


def parse_srs(text: str, parameter: str = "srs") -> str:
    """A CRS named by an authority code (``EPSG:3857``), never a PROJ string; upper case.

    Raises:
        InvalidInputError: not ``EPSG:<code>`` (or ``ESRI:<code>``), or a code PROJ lacks.
    """
    match = _SRS.match(text)
    if match is None:
        raise InvalidInputError(
            f"{parameter} must be an authority code such as EPSG:3857",
            parameter=parameter,
            value=text[:64],
        )
    srs = f"{match[1].upper()}:{int(match[2])}"  # one spelling: EPSG:3857
    try:
        crs_valid_area(srs)  # a code PROJ does not know is refused here
    except InvalidInputError as exc:
        exc.detail["parameter"] = parameter  # the parameter that named it (``bbox_crs``, …)
        raise
    return srs


@functools.lru_cache(maxsize=256)
def crs_valid_area(srs: str) -> Bbox:
    """Where coordinates of ``srs`` make sense: its area of use, in its own units.

    Geographic CRSs take the whole globe; projected ones their area of use plus a margin.

    Raises:
        InvalidInputError: PROJ does not know the code.
    """
    try:
        crs = CRS.from_user_input(srs)
    except CRSError:
        raise InvalidInputError(f"unknown srs {srs!r}", parameter="srs", value=srs) from None
    if crs.is_geographic:
        return (-180.0, -90.0, 180.0, 90.0)
    area = crs.area_of_use
    west, south, east, north = area.bounds if area else (-180.0, -90.0, 180.0, 90.0)
    transformer = Transformer.from_crs(_WGS84, crs, always_xy=True)
    x0, y0, x1, y1 = transformer.transform_bounds(west, south, east, north, densify_pts=21)
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)):
        raise InvalidInputError(f"srs {srs!r} has no usable area", parameter="srs", value=srs)
    dx, dy = (x1 - x0) * _MARGIN, (y1 - y0) * _MARGIN
    return (x0 - dx, y0 - dy, x1 + dx, y1 + dy)


def box_numbers(text: str, parameter: str = "bbox") -> Bbox:
    """``minx,miny,maxx,maxy``: four finite numbers, min below max (in no CRS yet).

    Raises:
        InvalidInputError: not four numbers, not finite, or min not below max.
    """
    try:
        x0, y0, x1, y1 = (float(v) for v in text.split(","))
    except ValueError:
        raise InvalidInputError(
            f"{parameter} must be minx,miny,maxx,maxy", parameter=parameter, value=text[:200]
        ) from None
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or not (x0 < x1 and y0 < y1):
        raise InvalidInputError(
            f"{parameter} must be four finite numbers with min < max",
            parameter=parameter,
            value=text[:200],
        )
    return x0, y0, x1, y1


def parse_bbox(text: str, parameter: str = "bbox", srs: str = _WGS84) -> Bbox:
    """``minx,miny,maxx,maxy``: four finite numbers, min below max, inside the CRS's area.

    Args:
        text: the parameter's text.
        parameter: its name, for the message.
        srs: the CRS of the numbers (an authority code, see :func:`parse_srs`).

    Raises:
        InvalidInputError: not four numbers, not finite, min not below max, or outside the
            valid area of ``srs``.
    """
    x0, y0, x1, y1 = box_numbers(text, parameter)
    ax0, ay0, ax1, ay1 = crs_valid_area(srs)
    if not (ax0 <= x0 and ay0 <= y0 and x1 <= ax1 and y1 <= ay1):
        raise InvalidInputError(
            f"{parameter} lies outside the valid area of {srs}",
            parameter=parameter,
            value=text[:200],
            valid=[round(v, 6) for v in (ax0, ay0, ax1, ay1)],
        )
    return x0, y0, x1, y1


def parse_time_or_age(text: str, now: float, parameter: str = "refresh_before") -> float:
    """A moment: an ISO 8601 time (``2026-11-01``, ``2026-11-01T06:00:00Z``; UTC when it names
    no offset) or an age before ``now`` (``7d``, ``12h``, ``30m``, ``45s``, ``2w``).

    Returns:
        POSIX seconds.

    Raises:
        InvalidInputError: neither, or a time after ``now``.
    """
    age = _AGE.match(text)
    if age is not None:
        return now - int(age.group(1)) * _UNIT_S[age.group(2)]
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInputError(
            f"{parameter} must be an ISO 8601 time (2026-11-01T06:00:00Z) or an age (7d, 12h,"
            " 30m, 45s, 2w)",
            parameter=parameter,
            value=text[:100],
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = moment.timestamp()
    if seconds > now:
        raise InvalidInputError(
            f"{parameter} is in the future", parameter=parameter, value=text[:100]
        )
    return seconds
