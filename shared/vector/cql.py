"""CQL2 filters of a layer (OGC API – Features Part 3), in CQL2-text or CQL2-JSON, as SQL
conditions, and the layer's queryables.

pygeofilter parses the text (or the JSON) and its SQLAlchemy backend builds the condition over
columns made from the catalogue's field names; it is compiled for PostgreSQL with named parameters,
so every value of the filter reaches the database as a bound parameter (cast to its field's type)
and every identifier comes from the catalogue. Its geometry literals (WKT) are read by GEOS, not
tokenised by the parser (:func:`_lifted`: ~5 µs of CPU a token, milliseconds a polygon). What is
understood: comparisons of a property with a value (``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``),
``AND``/``OR``/``NOT``, ``IS [NOT] NULL``, ``[NOT] LIKE``, ``[NOT] BETWEEN``, ``[NOT] IN``,
``DATE``/``TIMESTAMP`` values, and the spatial functions (``S_INTERSECTS``, ``S_WITHIN``… and
``S_INTERSECTS(geom, BBOX(...))``) of the geometry (its column's name, or ``geometry``) with a
geometry in CRS84. Anything else (functions, arithmetic, temporal functions, two properties
compared) is a ``400``.

Before any SQL is made, a filter is held to its layer's queryables (a value of another type
than its field's, ``pop_est = true``, is a ``400`` naming the field) and to bounds of its work:
:data:`MAX_FILTER_CHARS`, :data:`MAX_FILTER_VERTICES`, :data:`MAX_FILTER_VALUES` and
:data:`MAX_FILTER_DEPTH`. A geometry reaches the database as WKB in a scalar subquery, made
once per statement (not once per row, as a function of a parameter would be under a generic
plan), and the spatial index can take it.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, TypeVar

import shapely.geometry  # type: ignore[import-untyped]
import shapely.wkt  # type: ignore[import-untyped]
import sqlalchemy as sa
from lark.exceptions import LarkError
from pygeofilter import ast, values  # type: ignore[import-untyped]
from pygeofilter.backends.evaluator import handle  # type: ignore[import-untyped]
from pygeofilter.backends.sqlalchemy.evaluate import (  # type: ignore[import-untyped]
    SQLAlchemyFilterEvaluator,
)
from pygeofilter.parsers.cql2_json import parse as parse_json  # type: ignore[import-untyped]
from pygeofilter.parsers.cql2_text import parse  # type: ignore[import-untyped]
from shapely.errors import ShapelyError  # type: ignore[import-untyped]
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.sql import visitors
from sqlalchemy.sql.elements import BindParameter, ClauseElement, ColumnClause
from sqlalchemy.sql.selectable import ScalarSelect
from sqlalchemy.types import UserDefinedType

from shared.errors import InvalidInputError, MapsvcError
from shared.vector.catalog import VectorLayer

__all__ = [
    "CQL_LANGS",
    "MAX_FILTER_CHARS",
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_VALUES",
    "MAX_FILTER_VERTICES",
    "CqlFilter",
    "parse_cql",
    "queryables",
    "refusing",
]

#: the languages of a filter (``filter-lang``)
CQL_LANGS = ("cql2-text", "cql2-json")
#: the longest filter taken (its SQL and its work stay small)
MAX_FILTER_CHARS = 4000
#: the most vertices of a filter's geometries, all of them together (a bound of their work
#: whatever the text's length: 500 short ones fit in 4000 characters, 250 of 4 decimals each)
MAX_FILTER_VERTICES = 500
#: the most values of one ``IN (…)`` list
MAX_FILTER_VALUES = 100
#: the deepest nesting of a filter's conditions (a chain of ``AND``, or of ``OR``, is one level)
MAX_FILTER_DEPTH = 20
_PARAMETER = "filter"
#: the name the geometry may go by in a filter besides its column's
GEOMETRY_NAME = "geometry"
_NUMERIC = {"smallint", "integer", "bigint", "numeric", "real", "double precision"}
_SPATIAL = {
    "INTERSECTS": sa.func.ST_Intersects,
    "DISJOINT": sa.func.ST_Disjoint,
    "CONTAINS": sa.func.ST_Contains,
    "WITHIN": sa.func.ST_Within,
    "TOUCHES": sa.func.ST_Touches,
    "CROSSES": sa.func.ST_Crosses,
    "OVERLAPS": sa.func.ST_Overlaps,
    "EQUALS": sa.func.ST_Equals,
}
#: PostgreSQL without a driver's casts (``:p::VARCHAR``): ``:name`` parameters only
_DIALECT = PGDialect(paramstyle="named")  # type: ignore[no-untyped-call]
_F = TypeVar("_F", bound=Callable[..., Any])
#: what the lifting of geometry literals steps over or takes: a quoted string (``''`` inside
#: it is a quote), a quoted name, a WKT literal's keyword up to its first ``(``
_LITERALS = re.compile(
    r"'(?:[^']|'')*'|\"[^\"]*\"|"
    r"(?<![\w.])(?:MULTI(?:POINT|LINESTRING|POLYGON)|POINT|LINESTRING|POLYGON|GEOMETRYCOLLECTION)"
    r"\s*(?:ZM|Z|M)?\s*\(",
    re.IGNORECASE,
)
_PARENTHESES = re.compile(r"[()]")


@dataclass(frozen=True)
class CqlFilter:
    """A filter: its text (CQL2-text as given; CQL2-JSON in one form, keys sorted, no space:
    one cache entry and one link for every spelling of it), its language, and the SQL
    condition on the layer aliased ``t``."""

    text: str
    sql: str = field(compare=False)
    params: dict[str, Any] = field(compare=False)
    lang: str = "cql2-text"


class _Kind(UserDefinedType[Any]):
    """A field's type as the catalogue names it: a value compared with the field is cast to
    it, so ``value > '100'`` compares numbers and ``born = '2020-01-02'`` dates."""

    cache_ok = True

    def __init__(self, name: str) -> None:
        self.name = name

    def get_col_spec(self, **kw: Any) -> str:
        return self.name  # from the catalogue (format_type), never from a request

    def bind_expression(self, bindvalue: Any) -> Any:
        return sa.cast(bindvalue, self)


def _handles(*nodes: type, subclasses: bool = False) -> Callable[[_F], _F]:
    """pygeofilter's ``handle`` (a method handles these nodes), typed."""
    marked: Callable[[_F], _F] = handle(*nodes, subclasses=subclasses)
    return marked


def _refuse(message: str, **detail: Any) -> InvalidInputError:
    return InvalidInputError(f"filter: {message}", parameter=_PARAMETER, **detail)


def refusing(error: MapsvcError, parameter: str) -> MapsvcError:
    """``error`` (a refusal of a filter) as the refusal of ``parameter``, the query parameter
    that carried the filter (a coverage's ``where``); any other error as it is."""
    if not isinstance(error, InvalidInputError) or error.detail.get("parameter") != _PARAMETER:
        return error
    message = error.message.removeprefix(f"{_PARAMETER}: ")
    return InvalidInputError(f"{parameter}: {message}", **{**error.detail, "parameter": parameter})


def _is_value(item: object) -> bool:
    """Whether ``item`` is a value of the filter (not a column nor any SQL)."""
    return isinstance(item, str | int | float | bool | date | datetime)


def _type_of(value: object) -> str:
    """What a value of a filter is, as its queryable's JSON Schema would say it."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, datetime):
        return "date-time"
    return "date" if isinstance(value, date) else "string"


def _takes(kind: str, value: object) -> bool:
    """Whether a field of PostgreSQL type ``kind`` may be compared with ``value``, by the
    field's queryable: numbers with numbers (or their text), booleans with ``TRUE``/``FALSE``,
    dates and timestamps with ``DATE``/``TIMESTAMP`` values (or their text), anything else
    (texts, arrays, JSON) with a string."""
    schema, given = _schema(kind), _type_of(value)
    wanted = schema.get("format") or schema.get("type")
    if wanted in ("integer", "number"):
        return given in ("number", "string")  # a string is checked as a number
    if wanted in ("date", "date-time"):
        return given in ("date", "date-time", "string")
    return given == ("boolean" if wanted == "boolean" else "string")


def _lifted(text: str) -> tuple[str, list[Any]]:
    """``text`` with each geometry literal replaced by ``POINT(<k> 0)`` (``k``: its number),
    and the literals read by GEOS (shapely geometries); ``text`` itself and none when one is
    not WKT GEOS reads (the parser then says what is wrong with it).

    pygeofilter's parser (lark) takes ~5 µs of CPU a token: a filter's 180-vertex polygon was
    ~3 ms of the API process's time, held under the GIL in whatever thread it ran, and every
    other request waited for it (a flood of such filters tripled their p99). GEOS reads it in
    tens of microseconds; the parser reads the rest."""
    pieces: list[str] = []
    shapes: list[Any] = []
    at = 0
    for match in _LITERALS.finditer(text):
        if match.group()[0] in "'\"" or match.start() < at:
            continue  # a string, a name, or a literal inside the one just lifted
        depth, end = 0, None
        for paren in _PARENTHESES.finditer(text, match.end() - 1):
            depth += 1 if paren.group() == "(" else -1
            if depth == 0:
                end = paren.end()
                break
        if end is None:
            return text, []
        try:
            shape = shapely.wkt.loads(text[match.start() : end])
        except (ShapelyError, ValueError):
            return text, []
        pieces += [text[at : match.start()], f"POINT({len(shapes)} 0)"]
        shapes.append(shape)
        at = end
    return "".join(pieces) + text[at:], shapes


def _put_back(tree: object, shapes: list[Any]) -> None:
    """The geometries of :func:`_lifted` in place of their ``POINT(<k> 0)`` in ``tree``, as
    they are (not as GeoJSON: made again, point by point, that took longer than the parse)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, values.Geometry):
            node.geometry = shapes[int(node.geometry["coordinates"][0])]
        elif isinstance(node, ast.Node):
            stack += node.get_sub_nodes()


def _shape(node: values.Geometry) -> Any:
    """The shapely geometry of a geometry value (lifted, or the parser's GeoJSON)."""
    geometry = node.geometry
    if isinstance(geometry, shapely.Geometry):
        return geometry
    return shapely.geometry.shape(geometry)


def _check_cost(tree: object) -> None:
    """Refuse a filter whose work is past the bounds, before any SQL is made of it: its
    geometries' vertices (:data:`MAX_FILTER_VERTICES` in all), an ``IN`` list
    (:data:`MAX_FILTER_VALUES`), its nesting (:data:`MAX_FILTER_DEPTH`)."""
    vertices, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, values.Geometry):
            try:
                vertices += shapely.get_num_coordinates(_shape(node))
            except (ShapelyError, ValueError, TypeError, KeyError):
                pass  # refused as invalid when its SQL is made
            if vertices > MAX_FILTER_VERTICES:
                raise _refuse(
                    f"its geometries have more than {MAX_FILTER_VERTICES} vertices in all",
                    limit=MAX_FILTER_VERTICES,
                )
        if not isinstance(node, ast.Node):
            continue
        if depth > MAX_FILTER_DEPTH:
            raise _refuse(
                f"nested more than {MAX_FILTER_DEPTH} levels deep", limit=MAX_FILTER_DEPTH
            )
        if isinstance(node, ast.In) and len(node.sub_nodes) > MAX_FILTER_VALUES:
            raise _refuse(
                f"an IN list has more than {MAX_FILTER_VALUES} values", limit=MAX_FILTER_VALUES
            )
        chain = type(node) if isinstance(node, ast.And | ast.Or) else None
        for sub in node.get_sub_nodes():  # a condition in another is a level deeper
            deeper = isinstance(sub, ast.Condition | ast.Predicate) and type(sub) is not chain
            stack.append((sub, depth + 1 if deeper else depth))


class _Evaluator(SQLAlchemyFilterEvaluator):  # type: ignore[misc]
    """pygeofilter's SQLAlchemy evaluator held to the layer: its fields only, values cast to
    their field's type, geometries in CRS84 brought to the layer's SRID."""

    def __init__(self, layer: VectorLayer) -> None:
        super().__init__({}, False)
        self.layer = layer
        names = {**layer.fields, layer.geometry_column: "geometry"}
        table = sa.table("t", *(sa.column(n, _Kind(k)) for n, k in names.items()))
        self.columns: dict[str, ColumnClause[Any]] = dict(table.c.items())
        self.geometry = self.columns.pop(layer.geometry_column)
        self.geometry_names = {layer.geometry_column}
        if GEOMETRY_NAME not in layer.fields:
            self.geometry_names.add(GEOMETRY_NAME)

    @_handles(ast.Attribute)
    def attribute(self, node: ast.Attribute) -> ColumnClause[Any]:
        if node.name in self.geometry_names:
            return self.geometry
        if node.name not in self.columns:
            raise InvalidInputError(
                f"unknown field {node.name[:100]!r} in filter; valid fields: "
                + ", ".join([*self.layer.fields, *sorted(self.geometry_names)]),
                parameter=_PARAMETER,
                valid=[*self.layer.fields, *sorted(self.geometry_names)],
            )
        return self.columns[node.name]

    def _operands(self, node: ast.Node, *items: Any) -> list[Any]:
        """The operands of a predicate of one field and values: the field, and each value bound
        as the field's type (``400`` for anything else)."""
        name = type(node).__name__
        column = self._field(node, items)
        kind = self.layer.fields[column.name]
        operands: list[Any] = []
        for item in items:
            if item is column:
                operands.append(column)
                continue
            if not _is_value(item):
                raise _refuse(f"{name} takes values, not {type(item).__name__}")
            shown = repr(item[:50]) if isinstance(item, str) else str(item).upper()[:50]
            if not _takes(kind, item):
                raise _refuse(
                    f"{column.name} is {kind}, {shown} is a {_type_of(item)}", field=column.name
                )
            if kind in _NUMERIC and isinstance(item, str):
                try:
                    float(item)
                except ValueError:
                    raise _refuse(
                        f"{column.name} is {kind}, {shown} is not a number", field=column.name
                    ) from None
            operands.append(sa.bindparam(None, item, type_=column.type))
        return operands

    def _field(self, node: ast.Node, items: tuple[Any, ...]) -> ColumnClause[Any]:
        """The one field (not the geometry) among a predicate's operands (else ``400``)."""
        found = [i for i in items if isinstance(i, ColumnClause)]
        if len(found) != 1 or found[0] is self.geometry:
            raise _refuse(
                f"{type(node).__name__} compares a property (not the geometry) with values"
            )
        return found[0]

    @_handles(ast.Comparison, subclasses=True)
    def comparison(self, node: ast.Comparison, lhs: Any, rhs: Any) -> Any:
        return super().comparison(node, *self._operands(node, lhs, rhs))

    @_handles(ast.Between)
    def between(self, node: ast.Between, lhs: Any, low: Any, high: Any) -> Any:
        return super().between(node, *self._operands(node, lhs, low, high))

    @_handles(ast.In)
    def in_(self, node: ast.In, lhs: Any, *options: Any) -> Any:
        return super().in_(node, *self._operands(node, lhs, *options))

    @_handles(ast.Like)
    def like(self, node: ast.Like, lhs: Any) -> Any:
        column = self._field(node, (lhs,))
        if not isinstance(node.pattern, str):
            shown = str(node.pattern)[:50]
            raise _refuse(f"LIKE of {column.name} takes a string, not {shown}", field=column.name)
        return super().like(node, sa.cast(column, sa.Text))  # any field, as text

    @_handles(ast.IsNull)
    def null(self, node: ast.IsNull, lhs: Any) -> Any:
        if lhs is not self.geometry:
            self._operands(node, lhs)
        return super().null(node, lhs)

    @_handles(ast.SpatialComparisonPredicate, subclasses=True)
    def spatial_operation(self, node: ast.Node, lhs: Any, rhs: Any) -> Any:
        if self.geometry not in (lhs, rhs) or not all(
            o is self.geometry or isinstance(o, ScalarSelect) for o in (lhs, rhs)
        ):
            raise _refuse(f"{node.op.value} compares the geometry with a geometry value")
        return _SPATIAL[node.op.name](lhs, rhs)

    @_handles(values.Geometry)
    def geometry_value(self, node: values.Geometry) -> Any:
        try:
            shape = _shape(node)
        except (ShapelyError, ValueError, TypeError, KeyError) as exc:
            raise _refuse(f"a geometry is invalid: {str(exc)[:100]}") from None
        wkb = sa.bindparam(None, shape.wkb, type_=sa.LargeBinary)
        return self._in_layer(sa.func.ST_GeomFromWKB(wkb, 4326), shape.bounds)

    @_handles(ast.Function)
    def function(self, node: ast.Function, *arguments: Any) -> Any:
        if node.name.lower() != "bbox" or len(arguments) not in (4, 6):
            raise _refuse(f"function {node.name[:50]} is not supported (only BBOX)")
        if not all(isinstance(a, int | float) and not isinstance(a, bool) for a in arguments):
            raise _refuse("BBOX takes numbers")
        half = len(arguments) // 2
        x0, y0, x1, y1 = (*arguments[:half][:2], *arguments[half:][:2])
        box = sa.func.ST_MakeEnvelope(x0, y0, x1, y1, 4326)
        return self._in_layer(box, (x0, y0, x1, y1))

    @_handles(
        ast.Arithmetic,
        ast.TemporalPredicate,
        ast.ArrayPredicate,
        ast.SpatialDistancePredicate,
        ast.Relate,
        ast.BBox,
        ast.Exists,
        ast.Include,
        values.Interval,
        values.Envelope,
        subclasses=True,
    )
    def unsupported(self, node: object, *arguments: Any) -> Any:
        raise _refuse(f"{type(node).__name__} is not supported")

    def adopt(self, node: object, *arguments: Any) -> Any:
        raise _refuse(f"{type(node).__name__} is not supported")

    def _in_layer(self, shape: Any, bounds: tuple[float, ...]) -> ScalarSelect[Any]:
        """A geometry in CRS84 (within the world's degrees) in the layer's SRID, made once per
        statement (a scalar subquery: PostgreSQL runs it once, its ``InitPlan``)."""
        x0, y0, x1, y1 = bounds
        if not (-180 <= x0 <= x1 <= 180 and -90 <= y0 <= y1 <= 90 and math.isfinite(x0)):
            raise _refuse(
                "a geometry lies outside -180,-90,180,90 (CRS84), or a BBOX's min exceeds its max"
            )
        srid = self.layer.srid
        in_srid = shape if srid == 4326 else sa.func.ST_Transform(shape, srid)
        return sa.select(in_srid).scalar_subquery()


def parse_cql(text: str, layer: VectorLayer, lang: str = "cql2-text") -> CqlFilter:
    """The CQL2 filter ``text`` of ``layer``, in ``lang`` (:data:`CQL_LANGS`), as an SQL
    condition.

    Raises:
        InvalidInputError: longer than :data:`MAX_FILTER_CHARS`, not CQL2-text or CQL2-JSON
            (the parser's message, shortened), past the bounds of its work (``detail.limit``),
            an unknown field, a value of another type than its field's (``detail.field``), or
            what is not supported here (``400``, ``detail.parameter`` is ``filter``).
    """
    text = text.strip()
    if len(text) > MAX_FILTER_CHARS:
        raise _refuse(f"at most {MAX_FILTER_CHARS} characters")
    try:
        tree, text = _json_tree(text) if lang == "cql2-json" else (_text_tree(text), text)
        _check_cost(tree)
        condition = _Evaluator(layer).evaluate(tree)
        if not isinstance(condition, ClauseElement):  # a bare value: TRUE, 'x'
            raise _refuse("not a condition")
        return _compiled(text, condition, lang)
    except RecursionError:
        raise _refuse("nested too deeply") from None


def _text_tree(text: str) -> Any:
    """The tree of a CQL2-text filter (its WKT read by GEOS, not by the parser)."""
    lifted, shapes = _lifted(text)
    try:
        tree = parse(lifted)
    except LarkError as exc:
        raise _refuse(f"not CQL2-text: {str(exc).splitlines()[0][:200]}") from None
    if shapes:
        _put_back(tree, shapes)
    return tree


def _json_tree(text: str) -> tuple[Any, str]:
    """The tree of a CQL2-JSON filter, and the filter in one form (keys sorted, no space)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _refuse(f"not JSON: {str(exc)[:200]}") from None
    try:
        tree = parse_json(_boxes_as_polygons(data))
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise _refuse(f"not CQL2-JSON: {str(exc)[:200]}") from None
    return tree, json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _boxes_as_polygons(data: Any) -> Any:
    """``data`` with each ``{"bbox": [w, s, e, n]}`` a GeoJSON polygon (pygeofilter reads a
    bbox's numbers in another order)."""
    if isinstance(data, list):
        return [_boxes_as_polygons(item) for item in data]
    if not isinstance(data, dict):
        return data
    box = data.get("bbox")
    if len(data) == 1 and isinstance(box, list) and len(box) in (4, 6):
        half = len(box) // 2
        w, s, e, n = (*box[:half][:2], *box[half:][:2])
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in (w, s, e, n)):
            ring = [[w, s], [e, s], [e, n], [w, n], [w, s]]
            return {"type": "Polygon", "coordinates": [ring]}
    return {key: _boxes_as_polygons(value) for key, value in data.items()}


def _compiled(text: str, condition: ClauseElement, lang: str) -> CqlFilter:
    """The condition as SQL text with its values bound as ``:cqlN`` (no name of another
    condition of the query)."""
    numbers = itertools.count()

    def rename(bind: BindParameter[Any]) -> None:
        bind.key = f"cql{next(numbers)}"
        bind.unique = False

    condition = visitors.cloned_traverse(condition, {}, {"bindparam": rename})
    compiled = condition.compile(dialect=_DIALECT, compile_kwargs={"render_postcompile": True})
    return CqlFilter(text, str(compiled), dict(compiled.params), lang)


def _schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of a field of PostgreSQL type ``kind``."""
    if kind.endswith("[]"):
        return {"type": "array", "items": _schema(kind[:-2])}
    if kind in ("smallint", "integer", "bigint"):
        return {"type": "integer"}
    if kind in _NUMERIC:
        return {"type": "number"}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "date":
        return {"type": "string", "format": "date"}
    if kind.startswith("timestamp"):
        return {"type": "string", "format": "date-time"}
    if kind in ("json", "jsonb"):
        return {}
    return {"type": "string"}


def queryables(layer: VectorLayer) -> dict[str, dict[str, Any]]:
    """What a filter of ``layer`` may name: each field's JSON Schema, and the geometry's
    (``format`` ``geometry-<type>``, OGC API – Features Part 3)."""
    kind = layer.geometry_type.lower()
    shape = "any" if kind in ("geometry", "geometrycollection") else kind
    found: dict[str, dict[str, Any]] = {
        layer.geometry_column: {"title": "Geometry", "format": f"geometry-{shape}"}
    }
    for name, kind in layer.fields.items():
        found[name] = {"title": name, **_schema(kind)}
    return found
