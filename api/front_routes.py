"""The nginx front's location patterns, derived from the endpoints it serves (``api.endpoint``).

A path parameter's pattern comes from its field in the endpoint's query model: its ``pattern``,
its ``enum``, or the digits of an integer's ``maximum``; where a field says less than the front
must know (a collection that is a raster layer, one tile matrix set), the front narrows it
with a pattern of its own, derived too. The front reads tiles of the routes declared in
:mod:`api.routes.tiles`, :mod:`api.routes.vector` and :mod:`api.routes.ogc_tiles`; changing a
path or a parameter there changes the front.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from api.endpoint import Endpoint
from api.mounts import USER_PREFIX, V1_PREFIX

__all__ = ["location_pattern", "parameter_pattern"]


def _non_capturing(pattern: str) -> str:
    """``pattern`` without anchors, its groups non-capturing (nginx names only ours)."""
    return re.sub(r"\((?!\?)", "(?:", pattern.strip("^$"))


def parameter_pattern(endpoint: Endpoint, name: str) -> str:
    """The regular expression of path parameter ``name`` of ``endpoint``, from its field.

    Raises:
        ValueError: the field says nothing a pattern can be made of.
    """
    assert endpoint.query is not None, endpoint.name
    schema = endpoint.query.model_json_schema(by_alias=True)["properties"][name]
    if "pattern" in schema:
        return _non_capturing(schema["pattern"])
    if "enum" in schema:
        return "(?:" + "|".join(re.escape(str(v)) for v in schema["enum"]) + ")"
    if schema.get("type") == "integer" and "maximum" in schema:
        return f"[0-9]{{1,{len(str(schema['maximum']))}}}"
    raise ValueError(f"{endpoint.name}: no pattern for path parameter {name}")


def location_pattern(
    endpoint: Endpoint,
    optional: Iterable[str] = (),
    *,
    patterns: Mapping[str, str] | None = None,
    names: Mapping[str, str] | None = None,
) -> str:
    """The regular expression of ``endpoint``'s paths under both mounts, each path parameter a
    named capture; a parameter in ``optional`` may be left out with the ``/`` after it.

    Args:
        endpoint: the route.
        optional: parameters that may be left out.
        patterns: a parameter's pattern, in place of its field's (one the field allows only).
        names: a parameter's capture name, in place of its own (the front's variable).
    """
    left_out, patterns, names = set(optional), patterns or {}, names or {}
    pattern = ""
    for literal, name, tail in re.findall(r"([^{]*)(?:{(\w+)(?::\w+)?}(/?))?", endpoint.path):
        pattern += re.escape(literal)
        if name:
            found = patterns[name] if name in patterns else parameter_pattern(endpoint, name)
            capture = f"(?<{names.get(name, name)}>{found}){re.escape(tail)}"
            pattern += f"(?:{capture})?" if name in left_out else capture
    mounts = "|".join(re.escape(m.lstrip("/")) for m in (USER_PREFIX, V1_PREFIX))
    return f"^/(?:{mounts}){pattern}$"
