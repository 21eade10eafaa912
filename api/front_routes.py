"""The nginx front's location patterns, derived from the endpoints it serves (``api.endpoint``).

A path parameter's pattern comes from its field in the endpoint's query model: its ``pattern``,
its ``enum``, or the digits of an integer's ``maximum``. The front reads tiles of the routes
declared in :mod:`api.routes.tiles`; changing a path or a parameter there changes the front.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

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


def location_pattern(endpoint: Endpoint, optional: Iterable[str] = ()) -> str:
    """The regular expression of ``endpoint``'s paths under both mounts, each path parameter a
    named capture; a parameter in ``optional`` may be left out with the ``/`` after it."""
    left_out = set(optional)
    pattern = ""
    for literal, name, tail in re.findall(r"([^{]*)(?:{(\w+)(?::\w+)?}(/?))?", endpoint.path):
        pattern += re.escape(literal)
        if name:
            capture = f"(?<{name}>{parameter_pattern(endpoint, name)}){re.escape(tail)}"
            pattern += f"(?:{capture})?" if name in left_out else capture
    mounts = "|".join(re.escape(m.lstrip("/")) for m in (USER_PREFIX, V1_PREFIX))
    return f"^/(?:{mounts}){pattern}$"
