"""Numbers as gdalinfo 3.6 writes and reads them: rounding, non-finite values, json-c's quirks."""

from __future__ import annotations

import math
import re

import numpy as np

__all__ = ["atof", "atoi", "non_finite_as_text", "rounded", "stac_nodata"]

_LEADING_NUMBER = re.compile(
    r"\s*([-+]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?))", re.I
)
_LEADING_INT = re.compile(r"\s*([-+]?\d+)")


def stac_nodata(value: float, gdal_type: str) -> float | str | None:
    """STAC ``nodata`` as gdalinfo 3.6 prints it, null included.

    gdalinfo writes nodata with the fewest significant digits that read back exactly, then
    deep-copies that JSON number into the STAC block. json-c cannot copy a number that carries
    a digit count, so the copy is null unless the count came out as 0 (a value exact with one
    digit, such as 0) or the value is not finite (written as a string).

    Args:
        value: the band's nodata value.
        gdal_type: the band's GDAL data type name.

    Returns:
        The value, its text when it is not finite, or None.
    """
    if not math.isfinite(value):
        return non_finite_as_text(value)
    single = gdal_type == "Float32" and float(np.float32(value)) == value
    digits, best = (8 if single else 18), ""
    while digits > 0:
        candidate = f"{value:.{digits}g}"
        if single:
            exact = np.float32(float(candidate)) == np.float32(value)
        else:
            exact = float(candidate) == value
        if best and not exact:
            digits += 1
            break
        best = candidate
        digits -= 1
    return value if digits == 0 else None


def non_finite_as_text(value: float) -> float | str:
    """``NaN``, ``Infinity`` or ``-Infinity`` as json-c writes them; a finite value as it is."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def rounded(value: float, digits: int) -> float | str:
    """``value`` to ``digits`` decimals, or its text when it is not finite."""
    return round(value, digits) if math.isfinite(value) else non_finite_as_text(value)


def atof(text: str) -> float:
    """The leading number of ``text``, 0 when there is none (GDAL's CPLAtofM)."""
    match = _LEADING_NUMBER.match(text)
    return float(match.group(1)) if match else 0.0


def atoi(text: str) -> int:
    """The leading integer of ``text``, 0 when there is none (C's atoi)."""
    match = _LEADING_INT.match(text)
    return int(match.group(1)) if match else 0
