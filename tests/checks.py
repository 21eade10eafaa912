"""Assertion helpers shared by test modules: the error shape, and answers against gdalinfo's."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Any

from rasterio.crs import CRS

__all__ = [
    "ADMIN_KEY",
    "AUTH",
    "CRS_JSON_KEYS",
    "CRS_TEXT_KEYS",
    "HEALTHY",
    "PYPROJECT_VERSION",
    "REGISTRY_CRS",
    "assert_error",
    "assert_same",
]

#: the admin key of the test settings (``MAPSVC_ADMIN_API_KEY``), and the header that sends it
ADMIN_KEY = "test-admin-key-0123456789abcdef-0123456789"
#: the version, read from pyproject.toml itself (the one source the service reads it from)
PYPROJECT_VERSION: str = tomllib.loads(
    (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
)["project"]["version"]
#: what ``GET /health`` answers
HEALTHY = {"status": "ok", "version": PYPROJECT_VERSION}
AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}

#: gdalinfo 3.6 prints the CRS as multi-line WKT2 and PROJJSON from Debian's PROJ 9.1 and its
#: EPSG database; rasterio's wheel carries GDAL 3.10, a newer PROJ and a newer database. So for
#: registry CRSs the WKT may differ for version reasons only (WGS 84's ensemble has gained
#: G2296, usage scopes were reworded, GDAL 3.10 reads the EPSG:3857 GeoTIFF keys into an
#: "unnamed" conversion on the WGS 84 datum), and the PROJJSON always may (schema v0.7 for v0.5,
#: a "type" in the base CRS, whose axes WKT2 does not carry and PROJ fills in its own order).
#: Such texts are compared as parsed CRSs; the WKT of a CRS that is not from the registry must
#: match character for character.
CRS_TEXT_KEYS = {"wkt", "proj:wkt2"}
REGISTRY_CRS = re.compile(r'\n    ID\["EPSG",\d+\]\]$')  # the root's identifier
CRS_JSON_KEYS = {"proj:projjson"}


def assert_error(body: dict[str, Any], code: str) -> dict[str, Any]:
    """``body`` is the one error shape with ``code``; returns its ``error`` object."""
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert set(error) == {"code", "message", "detail"}
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


def assert_same(ours: Any, theirs: Any, where: str = "$") -> None:
    """Field by field, numbers within a tight tolerance; the failure names the key path."""
    key = where.rsplit(".", 1)[-1]
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), f"{where}: {ours!r} is not an object"
        if key in CRS_JSON_KEYS:
            mine = {k: v for k, v in ours.items() if k != "$schema"}
            if mine != {k: v for k, v in theirs.items() if k != "$schema"}:
                assert CRS.from_dict(ours, projjson=True) == CRS.from_dict(theirs, projjson=True), (
                    f"{where}: a different CRS"
                )
            return
        assert ours.keys() == theirs.keys(), (
            f"{where}: keys missing {sorted(theirs.keys() - ours.keys())}, "
            f"extra {sorted(ours.keys() - theirs.keys())}"
        )
        for name in theirs:
            assert_same(ours[name], theirs[name], f"{where}.{name}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list), f"{where}: {ours!r} is not an array"
        assert len(ours) == len(theirs), f"{where}: {len(ours)} items, gdalinfo has {len(theirs)}"
        for i, (mine, its) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(mine, its, f"{where}[{i}]")
    elif isinstance(theirs, int | float) and not isinstance(theirs, bool):
        assert type(ours) is type(theirs), f"{where}: {ours!r} vs gdalinfo's {theirs!r}"
        assert math.isclose(ours, theirs, rel_tol=1e-12, abs_tol=1e-9), (
            f"{where}: {ours!r} vs gdalinfo's {theirs!r}"
        )
    elif key in CRS_TEXT_KEYS and REGISTRY_CRS.search(theirs) and ours != theirs:
        assert CRS.from_wkt(ours) == CRS.from_wkt(theirs), f"{where}: a different CRS"
        assert ours.count("\n") > 10, f"{where}: not multi-line"
    else:
        assert ours == theirs, f"{where}: {ours!r} vs gdalinfo's {theirs!r}"
