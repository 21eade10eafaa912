"""What a request asks of a layer, parsed and checked, and the SQL conditions it makes.

Filter grammar (``filter=``): conditions separated by ``,``; each is ``<field><op><value>`` with
``<op>`` one of ``=``, ``!=``, ``>=``, ``<=``, ``>``, ``<`` or ``~`` (case-insensitive
"contains"); ``\\,`` puts a comma into a value. Every value reaches the database as a bound
parameter cast to the field's type; every identifier comes from the catalogue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from shared.errors import InvalidInputError
from shared.vector.catalog import VectorLayer, ident
from shared.vector.cql import CqlFilter

__all__ = ["Condition", "LayerQuery", "parse_filter", "parse_names", "where_sql"]

_OPERATORS = ("!=", ">=", "<=", "=", ">", "<", "~")
_CONDITION = re.compile(r"^([A-Za-z_][A-Za-z0-9_ ]*?)\s*(!=|>=|<=|=|>|<|~)(.*)$", re.S)
_NUMERIC = {"smallint", "integer", "bigint", "numeric", "real", "double precision"}
GEOMETRY_TYPES = {
    "POINT",
    "MULTIPOINT",
    "LINESTRING",
    "MULTILINESTRING",
    "POLYGON",
    "MULTIPOLYGON",
    "GEOMETRYCOLLECTION",
}


@dataclass(frozen=True)
class Condition:
    """One condition of ``filter``."""

    field: str
    op: str
    value: str


@dataclass(frozen=True)
class LayerQuery:
    """What to read from a layer (GeoJSON features or the features of a vector tile)."""

    filters: tuple[Condition, ...] = ()
    props: tuple[str, ...] | None = None
    extent: tuple[float, float, float, float] | None = None
    ids: tuple[str, ...] | None = None
    geometry_type: str | None = None
    named_query: str | None = None
    cql: CqlFilter | None = None
    """A CQL2-text filter (OGC API – Features), besides ``filters``."""

    @property
    def filtered(self) -> bool:
        """Whether a caller's filter (``filter``, or a CQL2-text one) picks the rows: its
        statement runs under the filters' shorter timeout, and a database error of its values
        is the caller's (``400``)."""
        return bool(self.filters) or self.cql is not None

    def params(self) -> list[tuple[str, str]]:
        """The query as request parameters, in one form for every request that means it.

        Cache keys and links are made of these, so that no other parameter (nor another
        spelling of the same one) makes a new cache entry or reaches a cached answer.
        """
        params: list[tuple[str, str]] = []
        if self.filters:
            params.append(("filter", ",".join(_condition(c) for c in self.filters)))
        if self.props is not None:
            params.append(("props", ",".join(self.props)))
        if self.extent is not None:
            params.append(("extent", ",".join(repr(v) for v in self.extent)))
        if self.ids is not None:
            params.append(("id", ",".join(self.ids)))
        if self.geometry_type is not None:
            params.append(("type", self.geometry_type))
        if self.named_query is not None:
            params.append(("sql", self.named_query))
        if self.cql is not None:
            params += [("filter-lang", self.cql.lang), ("filter", self.cql.text)]
        return params


def _condition(cond: Condition) -> str:
    return cond.field + cond.op + cond.value.replace(",", "\\,")


def _split(text: str) -> list[str]:
    parts = re.split(r"(?<!\\),", text)
    return [p.replace("\\,", ",").strip() for p in parts if p.strip()]


def parse_names(text: str | None, layer: VectorLayer, parameter: str) -> tuple[str, ...] | None:
    """A comma-separated list of field names, checked against the layer."""
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    layer.check_fields(list(names), parameter)
    return names


def parse_filter(text: str | None, layer: VectorLayer) -> tuple[Condition, ...]:
    """The conditions of ``filter`` (see the module's grammar).

    Raises:
        InvalidInputError: a condition that does not parse, an unknown field, or a value
            that cannot be of the field's type.
    """
    if not text:
        return ()
    conditions = []
    for part in _split(text):
        match = _CONDITION.match(part)
        if match is None:
            raise InvalidInputError(
                f"filter condition {part[:100]!r} is not <field><op><value> with op one of "
                + " ".join(_OPERATORS),
                parameter="filter",
            )
        name, op, value = match.group(1).strip(), match.group(2), match.group(3).strip()
        layer.check_fields([name], "filter")
        if layer.fields[name] in _NUMERIC and op != "~":
            try:
                float(value)
            except ValueError:
                raise InvalidInputError(
                    f"filter: {name} is {layer.fields[name]}, {value[:50]!r} is not a number",
                    parameter="filter",
                ) from None
        conditions.append(Condition(name, op, value))
    return tuple(conditions)


def check_geometry_type(text: str | None) -> str | None:
    """A geometry type name (``Polygon``, ``MultiLineString``…), upper-cased."""
    if text is None:
        return None
    if text.upper() not in GEOMETRY_TYPES:
        raise InvalidInputError(
            f"type must be one of {', '.join(sorted(GEOMETRY_TYPES))}", parameter="type"
        )
    return text.upper()


def where_sql(
    layer: VectorLayer, query: LayerQuery, alias: str = "t"
) -> tuple[str, dict[str, Any]]:
    """The SQL conditions of a query (``TRUE`` when there are none) and their parameters."""
    clauses: list[str] = []
    params: dict[str, Any] = {}
    geom = f"{alias}.{ident(layer.geometry_column)}"
    for i, cond in enumerate(query.filters):
        column, kind, name = f"{alias}.{ident(cond.field)}", layer.fields[cond.field], f"f{i}"
        if cond.op == "~":
            escaped = cond.value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            clauses.append(f"{column}::text ILIKE '%' || :{name} || '%'")
            params[name] = escaped
        else:
            op = "<>" if cond.op == "!=" else cond.op
            clauses.append(f"{column} {op} CAST(:{name} AS {kind})")
            params[name] = cond.value
    if query.extent is not None:
        clauses.append(
            f"{geom} && ST_Transform(ST_MakeEnvelope(:ex0, :ey0, :ex1, :ey1, 4326), {layer.srid})"
        )
        params.update(zip(("ex0", "ey0", "ex1", "ey1"), query.extent, strict=True))
    if query.ids is not None:
        if layer.primary_key is None:
            raise InvalidInputError(
                f"layer {layer.id} has no primary key: id cannot be used", parameter="id"
            )
        kind = layer.fields[layer.primary_key]
        clauses.append(f"{alias}.{ident(layer.primary_key)} = ANY(CAST(:ids AS {kind}[]))")
        params["ids"] = list(query.ids)
    if query.geometry_type is not None:
        clauses.append(f"GeometryType({geom}) = :gtype")
        params["gtype"] = query.geometry_type
    if query.named_query is not None:
        if query.named_query not in layer.queries:
            raise InvalidInputError(
                f"sql names no query of layer {layer.id}; registered: "
                f"{', '.join(sorted(layer.queries)) or 'none'}",
                parameter="sql",
            )
        clauses.append(f"({layer.queries[query.named_query]})")  # SQL from the admin's config
    if query.cql is not None:  # its values bound as :cqlN, its names from the catalogue
        clauses.append(f"({query.cql.sql})")
        params.update(query.cql.params)
    return (" AND ".join(clauses) or "TRUE"), params
