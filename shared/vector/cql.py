"""CQL2-text filters of a layer (OGC API – Features Part 3) as SQL conditions, and the
layer's queryables.

pygeofilter parses the text and its SQLAlchemy backend builds the condition over columns made
from the catalogue's field names; it is compiled for PostgreSQL with named parameters, so every
value of the filter reaches the database as a bound parameter (cast to its field's type) and
every identifier comes from the catalogue. What is understood: comparisons of a property with a
value (``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``), ``AND``/``OR``/``NOT``, ``IS [NOT] NULL``,
``[NOT] LIKE``, ``[NOT] BETWEEN``, ``[NOT] IN``, ``DATE``/``TIMESTAMP`` values, and the spatial
functions (``S_INTERSECTS``, ``S_WITHIN``… and ``S_INTERSECTS(geom, BBOX(...))``) of the
geometry (its column's name, or ``geometry``) with a geometry in CRS84. Anything else
(functions, arithmetic, temporal functions, two properties compared) is a ``400``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, TypeVar

import shapely.geometry  # type: ignore[import-untyped]
import sqlalchemy as sa
from lark.exceptions import LarkError
from pygeofilter import ast, values  # type: ignore[import-untyped]
from pygeofilter.backends.evaluator import handle  # type: ignore[import-untyped]
from pygeofilter.backends.sqlalchemy.evaluate import (  # type: ignore[import-untyped]
    SQLAlchemyFilterEvaluator,
)
from pygeofilter.parsers.cql2_text import parse  # type: ignore[import-untyped]
from shapely.errors import ShapelyError  # type: ignore[import-untyped]
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.sql import visitors
from sqlalchemy.sql.elements import BindParameter, ClauseElement, ColumnClause
from sqlalchemy.types import UserDefinedType

from shared.errors import InvalidInputError
from shared.vector.catalog import VectorLayer

__all__ = ["MAX_FILTER_CHARS", "CqlFilter", "parse_cql", "queryables"]

#: the longest filter taken (its SQL and its work stay small)
MAX_FILTER_CHARS = 4000
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


@dataclass(frozen=True)
class CqlFilter:
    """A filter: its text as given, and the SQL condition on the layer aliased ``t``."""

    text: str
    sql: str = field(compare=False)
    params: dict[str, Any] = field(compare=False)


class _Kind(UserDefinedType[Any]):
    """A field's type as the catalogue names it: a value compared with the field is cast to
    it, so ``value > 100`` compares numbers and ``name = 5`` texts."""

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


def _refuse(message: str) -> InvalidInputError:
    return InvalidInputError(f"filter: {message}", parameter=_PARAMETER)


def _is_value(item: object) -> bool:
    """Whether ``item`` is a value of the filter (not a column nor any SQL)."""
    return isinstance(item, str | int | float | bool | date | datetime)


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
        found = [i for i in items if isinstance(i, ColumnClause)]
        if len(found) != 1 or found[0] is self.geometry:
            raise _refuse(f"{name} compares a property (not the geometry) with values")
        column = found[0]
        kind = self.layer.fields[column.name]
        operands: list[Any] = []
        for item in items:
            if item is column:
                operands.append(column)
                continue
            if not _is_value(item):
                raise _refuse(f"{name} takes values, not {type(item).__name__}")
            if kind in _NUMERIC and isinstance(item, str):
                try:
                    float(item)
                except ValueError:
                    raise _refuse(
                        f"{column.name} is {kind}, {item[:50]!r} is not a number"
                    ) from None
            operands.append(sa.bindparam(None, item, type_=column.type))
        return operands

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
        column = self._operands(node, lhs, node.pattern)[0]
        return super().like(node, sa.cast(column, sa.Text))  # any field, as text

    @_handles(ast.IsNull)
    def null(self, node: ast.IsNull, lhs: Any) -> Any:
        if lhs is not self.geometry:
            self._operands(node, lhs)
        return super().null(node, lhs)

    @_handles(ast.SpatialComparisonPredicate, subclasses=True)
    def spatial_operation(self, node: ast.Node, lhs: Any, rhs: Any) -> Any:
        if self.geometry not in (lhs, rhs) or not all(
            o is self.geometry or isinstance(o, sa.Function) for o in (lhs, rhs)
        ):
            raise _refuse(f"{node.op.value} compares the geometry with a geometry value")
        return _SPATIAL[node.op.name](lhs, rhs)

    @_handles(values.Geometry)
    def geometry_value(self, node: values.Geometry) -> Any:
        try:
            shape = shapely.geometry.shape(node.geometry)
        except (ShapelyError, ValueError, TypeError, KeyError) as exc:
            raise _refuse(f"a geometry is invalid: {str(exc)[:100]}") from None
        return self._in_layer(sa.func.ST_GeomFromText(shape.wkt, 4326), shape.bounds)

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

    def _in_layer(self, shape: Any, bounds: tuple[float, ...]) -> Any:
        """A geometry in CRS84 (within the world's degrees) in the layer's SRID."""
        x0, y0, x1, y1 = bounds
        if not (-180 <= x0 <= x1 <= 180 and -90 <= y0 <= y1 <= 90 and math.isfinite(x0)):
            raise _refuse(
                "a geometry lies outside -180,-90,180,90 (CRS84), or a BBOX's min exceeds its max"
            )
        srid = self.layer.srid
        return shape if srid == 4326 else sa.func.ST_Transform(shape, srid)


def parse_cql(text: str, layer: VectorLayer) -> CqlFilter:
    """The CQL2-text filter ``text`` of ``layer`` as an SQL condition.

    Raises:
        InvalidInputError: longer than :data:`MAX_FILTER_CHARS`, not CQL2-text (the parser's
            message, shortened), an unknown field, or what is not supported here (``400``,
            ``detail.parameter`` is ``filter``).
    """
    text = text.strip()
    if len(text) > MAX_FILTER_CHARS:
        raise _refuse(f"at most {MAX_FILTER_CHARS} characters")
    try:
        tree = parse(text)
    except LarkError as exc:
        raise _refuse(f"not CQL2-text: {str(exc).splitlines()[0][:200]}") from None
    except RecursionError:
        raise _refuse("nested too deeply") from None
    try:
        condition = _Evaluator(layer).evaluate(tree)
        if not isinstance(condition, ClauseElement):  # a bare value: TRUE, 'x'
            raise _refuse("not a condition")
        return _compiled(text, condition)
    except RecursionError:
        raise _refuse("nested too deeply") from None


def _compiled(text: str, condition: ClauseElement) -> CqlFilter:
    """The condition as SQL text with its values bound as ``:cqlN`` (no name of another
    condition of the query)."""
    numbers = itertools.count()

    def rename(bind: BindParameter[Any]) -> None:
        bind.key = f"cql{next(numbers)}"
        bind.unique = False

    condition = visitors.cloned_traverse(condition, {}, {"bindparam": rename})
    compiled = condition.compile(dialect=_DIALECT, compile_kwargs={"render_postcompile": True})
    return CqlFilter(text, str(compiled), dict(compiled.params))


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
