"""How a raster is drawn: TiTiler's rendering parameters, checked and put in one canonical form.

The names and meanings are TiTiler's, so that its users' URLs carry over: ``bidx`` (repeatable),
``expression`` (band math over ``b1…bN``, blocks separated by ``;``), ``rescale`` (``min,max``,
repeatable per band, the last one for the bands after it), ``colormap_name`` (rio-tiler's colour
maps) or ``colormap`` (JSON: value → colour, or ``[[min, max], colour]`` intervals),
``algorithm`` (``hillshade``, ``slope``, ``terrainrgb``, ``terrarium``) with
``algorithm_params`` (JSON), ``nodata`` (a number or ``nan``) and ``resampling``.

A :class:`Rendering` is frozen and canonical: the same values given in another order or
spelling (``rescale=0,1e3`` and ``rescale=0,1000``, a colour as ``#ff0000`` or
``[255,0,0,255]``) make an equal rendering with the same :attr:`Rendering.key`, the cache key
of its tiles. It is saved with a layer (JSON, :meth:`Rendering.to_json`) as its own drawing,
or given with one request.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numexpr
import numpy as np
from rio_tiler.colormap import cmap

from shared.errors import InvalidInputError
from shared.raster.resampling import LayerResampling

__all__ = [
    "ALGORITHMS",
    "MAX_COLORMAP_BYTES",
    "MAX_COLORMAP_ENTRIES",
    "MAX_EXPRESSION_CHARS",
    "RENDER_PARAMETERS",
    "Colour",
    "Rendering",
    "effective_rendering",
    "parse_rendering",
    "rendering_from_json",
]

#: The longest ``expression`` taken (characters).
MAX_EXPRESSION_CHARS = 512
#: The most entries of a ``colormap`` and its longest JSON text.
MAX_COLORMAP_ENTRIES = 256
MAX_COLORMAP_BYTES = 8 * 1024
#: The most bands a rendering reads (``bidx``, an expression's) and draws.
_MAX_BANDS = 64
_MAX_BLOCKS = 4
#: The query parameters of a rendering, as TiTiler names them.
RENDER_PARAMETERS = (
    "bidx",
    "expression",
    "rescale",
    "colormap_name",
    "colormap",
    "algorithm",
    "algorithm_params",
    "nodata",
    "resampling",
)

#: An RGBA colour.
Colour = tuple[int, int, int, int]

#: Each algorithm's parameters and their defaults (TiTiler's names and defaults for hillshade),
#: and how many bands it gives.
ALGORITHMS: dict[str, dict[str, float]] = {
    "hillshade": {"azimuth": 45.0, "angle_altitude": 45.0, "z_factor": 1.0},
    "slope": {"z_factor": 1.0},
    "terrainrgb": {"interval": 0.1, "baseval": -10000.0},
    "terrarium": {},
}
#: the range of each algorithm parameter
_PARAM_RANGES: dict[str, tuple[float, float]] = {
    "azimuth": (0.0, 360.0),
    "angle_altitude": (0.0, 90.0),
    "z_factor": (1e-6, 1e6),
    "interval": (1e-6, 1e6),
    "baseval": (-1e9, 1e9),
}
_BAND = re.compile(r"^b([0-9]{1,3})$")
#: numexpr's functions an expression may call
_FUNCTIONS = frozenset(
    {
        "abs", "sqrt", "exp", "log", "log10", "log1p", "expm1", "sin", "cos", "tan",
        "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "where",
        "floor", "ceil",
    }
)  # fmt: skip
_NODES = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.Constant,
    ast.Name,
    ast.Call,
    ast.Load,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.Pow,
    ast.Mod,
    ast.USub,
    ast.UAdd,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.BitAnd,
    ast.BitOr,
    ast.Invert,
)


@dataclass(frozen=True)
class Rendering:
    """A raster's drawing; every field optional (empty: as the layer's defaults say).

    ``colormap`` is ``(value, colour)`` pairs, or ``((min, max), colour)`` intervals (a value
    in ``[min, max)`` takes the colour), sorted.
    """

    bidx: tuple[int, ...] = ()
    expression: str | None = None
    rescale: tuple[tuple[float, float], ...] = ()
    colormap_name: str | None = None
    colormap: tuple[tuple[Any, Colour], ...] = ()
    algorithm: str | None = None
    algorithm_params: tuple[tuple[str, float], ...] = ()
    nodata: float | None = None
    resampling: LayerResampling | None = None
    #: the bands an expression reads (derived, not a parameter)
    expression_bands: tuple[int, ...] = field(default=(), compare=False, repr=False)

    @property
    def empty(self) -> bool:
        """Whether nothing is chosen."""
        return self == Rendering()

    @property
    def intervals(self) -> bool:
        """Whether the colour map is of intervals."""
        return bool(self.colormap) and isinstance(self.colormap[0][0], tuple)

    @property
    def bands_read(self) -> tuple[int, ...]:
        """The source bands this rendering reads (none chosen: the layer's defaults)."""
        return self.expression_bands if self.expression else self.bidx

    def params(self) -> dict[str, Any]:
        """The rendering as query parameters (lists for the repeatable ones), canonical."""
        out: dict[str, Any] = {}
        if self.bidx:
            out["bidx"] = [str(b) for b in self.bidx]
        if self.expression:
            out["expression"] = self.expression
        if self.rescale:
            out["rescale"] = [f"{_num(lo)},{_num(hi)}" for lo, hi in self.rescale]
        if self.colormap_name:
            out["colormap_name"] = self.colormap_name
        if self.colormap:
            out["colormap"] = _compact(self.colormap_json())
        if self.algorithm:
            out["algorithm"] = self.algorithm
            if self.algorithm_params:
                out["algorithm_params"] = _compact(dict(self.algorithm_params))
        if self.nodata is not None:
            out["nodata"] = _num(self.nodata)
        if self.resampling is not None:
            out["resampling"] = self.resampling.value
        return out

    def colormap_json(self) -> Any:
        """The colour map as TiTiler's JSON: ``{"value": [r, g, b, a]}`` or intervals."""
        if self.intervals:
            return [[list(lo_hi), list(rgba)] for lo_hi, rgba in self.colormap]
        return {_num(value): list(rgba) for value, rgba in self.colormap}

    def to_json(self) -> dict[str, Any]:
        """The rendering as a JSON object (a layer's saved drawing, an answer's field)."""
        out = self.params()
        if "colormap" in out:
            out["colormap"] = self.colormap_json()
        if "algorithm_params" in out:
            out["algorithm_params"] = dict(self.algorithm_params)
        return out

    @property
    def key(self) -> str:
        """A short digest of the canonical parameters: the cache key of its tiles."""
        text = _compact(self.params())
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def algorithm_value(self, name: str) -> float:
        """The value of an algorithm parameter (its default when not given)."""
        given = dict(self.algorithm_params)
        return given.get(name, ALGORITHMS[self.algorithm or ""].get(name, 0.0))

    def with_defaults(self, default: Rendering) -> Rendering:
        """This rendering where it chose, ``default`` where it did not choose the bands,
        their stretch (unless it chose bands, an expression or an algorithm: the default
        stretch is of the default bands), a colour map or the resampling."""
        chosen_bands = bool(self.bidx or self.expression or self.algorithm)
        return replace(
            self,
            bidx=self.bidx
            or (() if self.expression else default.bidx[: 1 if self.algorithm else None]),
            rescale=self.rescale or (() if chosen_bands else default.rescale),
            colormap=self.colormap or (() if self.colormap_name else default.colormap),
            resampling=self.resampling or default.resampling,
        )


def effective_rendering(asked: Rendering, own: Rendering | None) -> Rendering:
    """How a layer whose own rendering is ``own`` (None: drawn as imagery) is drawn when
    ``asked``: nothing asked, its own; else what was asked, the layer's where it chose nothing
    (:meth:`Rendering.with_defaults`)."""
    if own is None:
        return asked
    return own if asked.empty else asked.with_defaults(own)


def _num(value: float) -> str:
    """A number's canonical text: ``1000`` for ``1e3`` and ``1000.0``, ``nan``."""
    if math.isnan(value):
        return "nan"
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _invalid(parameter: str, message: str, value: object = None) -> InvalidInputError:
    detail: dict[str, Any] = {"parameter": parameter}
    if value is not None:
        detail["value"] = str(value)[:64]
    return InvalidInputError(f"{parameter}: {message}", **detail)


def _number(text: str, parameter: str, *, nan: bool = False) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise _invalid(parameter, "must be a number", text) from None
    if math.isinf(value) or (math.isnan(value) and not nan):
        raise _invalid(parameter, "must be a finite number", text)
    return value


def _bidx(values: Sequence[str], band_count: int | None) -> tuple[int, ...]:
    bands: list[int] = []
    for text in values:
        for part in str(text).split(","):
            try:
                band = int(part)
            except ValueError:
                raise _invalid("bidx", "must be band numbers (1, 2, …)", part) from None
            if band < 1 or (band_count is not None and band > band_count):
                top = f"1..{band_count}" if band_count is not None else "1 or more"
                raise _invalid("bidx", f"band {band} does not exist (bands are {top})", part)
            bands.append(band)
    if len(bands) > _MAX_BANDS:
        raise _invalid("bidx", f"at most {_MAX_BANDS} bands")
    return tuple(bands)


def _rescale(values: Sequence[str]) -> tuple[tuple[float, float], ...]:
    ranges = []
    for text in values:
        parts = str(text).split(",")
        if len(parts) != 2:
            raise _invalid("rescale", "must be two numbers, min,max", text)
        lo, hi = (_number(p, "rescale") for p in parts)
        if not lo < hi:
            raise _invalid("rescale", "min must be less than max", text)
        ranges.append((lo, hi))
    if len(ranges) > _MAX_BANDS:
        raise _invalid("rescale", f"at most {_MAX_BANDS} ranges")
    return tuple(ranges)


def _expression(text: str, band_count: int | None) -> tuple[str, tuple[int, ...]]:
    """The expression in canonical form (lower case, no spaces), and the bands it reads."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise _invalid("expression", f"at most {MAX_EXPRESSION_CHARS} characters")
    blocks = [b.strip().lower() for b in text.split(";") if b.strip()]
    if not blocks or len(blocks) > _MAX_BLOCKS:
        raise _invalid("expression", f"must have 1 to {_MAX_BLOCKS} blocks separated by ';'")
    bands: set[int] = set()
    canonical = []
    for block in blocks:
        try:
            tree = ast.parse(block, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise _invalid("expression", "is not a valid expression", block) from None
        calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if not isinstance(node, _NODES):
                raise _invalid("expression", f"{type(node).__name__} is not allowed", block)
            if isinstance(node, ast.Call):
                if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
                    names = ", ".join(sorted(_FUNCTIONS))
                    raise _invalid("expression", f"only these functions: {names}", block)
                if node.keywords:
                    raise _invalid("expression", "keyword arguments are not allowed", block)
            elif isinstance(node, ast.Name) and id(node) not in calls:
                match = _BAND.fullmatch(node.id)
                if match is None:
                    raise _invalid("expression", f"unknown name {node.id!r} (b1, b2, …)", block)
                band = int(match.group(1))
                if band < 1 or (band_count is not None and band > band_count):
                    raise _invalid("expression", f"band b{band} does not exist", block)
                bands.add(band)
            elif isinstance(node, ast.Constant) and not isinstance(node.value, int | float):
                raise _invalid("expression", "only numbers are allowed as constants", block)
        canonical.append(ast.unparse(tree).replace(" ", ""))
    if not bands:
        raise _invalid("expression", "reads no band (b1, b2, …)")
    _check_evaluates(canonical, bands)
    return ";".join(canonical), tuple(sorted(bands))


def _check_evaluates(blocks: list[str], bands: set[int]) -> None:
    """Refuse blocks numexpr cannot evaluate over float bands (a function's arity, ``&`` of
    floats): tried once on one pixel, so that no tile fails on it."""
    pixel = {f"b{band}": np.ones(1, np.float32) for band in bands}
    for block in blocks:
        try:
            with np.errstate(all="ignore"):
                numexpr.evaluate(block, local_dict=pixel)
        except Exception as exc:  # noqa: BLE001 - numexpr raises many kinds; each is a 400
            message = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
            raise _invalid("expression", f"cannot be evaluated: {message}", block) from None


def _colour(value: Any, parameter: str) -> Colour:
    if isinstance(value, str):
        text = value.lstrip("#")
        if re.fullmatch(r"[0-9a-fA-F]{6}([0-9a-fA-F]{2})?", text) is None:
            raise _invalid(parameter, "a colour is #rrggbb[aa] or [r, g, b(, a)]", value)
        channels = [int(text[i : i + 2], 16) for i in range(0, len(text), 2)]
    elif isinstance(value, list) and len(value) in (3, 4):
        channels = value
    else:
        raise _invalid(parameter, "a colour is #rrggbb[aa] or [r, g, b(, a)]", value)
    if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in channels):
        raise _invalid(parameter, "colour channels are whole numbers 0..255", value)
    r, g, b, *a = channels
    return (r, g, b, a[0] if a else 255)


def _colormap(text: str) -> tuple[tuple[Any, Colour], ...]:
    if len(text.encode()) > MAX_COLORMAP_BYTES:
        raise _invalid("colormap", f"at most {MAX_COLORMAP_BYTES} bytes")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise _invalid("colormap", "must be JSON") from None
    if not isinstance(value, dict | list):
        raise _invalid("colormap", "must be a JSON object or a list of intervals")
    if not value or len(value) > MAX_COLORMAP_ENTRIES:
        raise _invalid("colormap", f"must have 1 to {MAX_COLORMAP_ENTRIES} entries")
    if isinstance(value, dict):
        pairs = [(_number(k, "colormap"), _colour(c, "colormap")) for k, c in value.items()]
        return tuple(sorted(pairs))
    if isinstance(value, list):
        intervals = []
        for entry in value:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)):
                raise _invalid("colormap", "an interval is [[min, max], colour]")
            if len(entry[0]) != 2:
                raise _invalid("colormap", "an interval is [[min, max], colour]")
            lo, hi = (_number(str(v), "colormap") for v in entry[0])
            if not lo < hi:
                raise _invalid("colormap", "an interval's min must be less than its max")
            intervals.append(((lo, hi), _colour(entry[1], "colormap")))
        return tuple(sorted(intervals))
    raise _invalid("colormap", "must be a JSON object or a list of intervals")


def _algorithm(name: str, params_text: str | None) -> tuple[str, tuple[tuple[str, float], ...]]:
    if name not in ALGORITHMS:
        raise _invalid("algorithm", f"must be one of {', '.join(ALGORITHMS)}", name)
    if params_text is None:
        return name, ()
    try:
        given = json.loads(params_text) if len(params_text) <= 1024 else None
    except (ValueError, RecursionError):
        given = None
    if not isinstance(given, dict):
        raise _invalid("algorithm_params", "must be a JSON object of at most 1024 characters")
    known = ALGORITHMS[name]
    params = []
    for key, value in given.items():
        if key not in known:
            names = ", ".join(known) or "none"
            raise _invalid("algorithm_params", f"{name} takes {names}; not {key!r}")
        number = _number(str(value), "algorithm_params")
        lo, hi = _PARAM_RANGES[key]
        if not lo <= number <= hi:
            raise _invalid("algorithm_params", f"{key} must be {lo:g}..{hi:g}", value)
        if number != known[key]:
            params.append((key, number))
    return name, tuple(sorted(params))


def _one(query: Mapping[str, Any], name: str) -> str | None:
    value = query.get(name)
    if isinstance(value, list | tuple):
        value = value[-1] if value else None
    return None if value in (None, "") else str(value)


def _many(query: Mapping[str, Any], name: str) -> list[str]:
    value = query.get(name)
    if value in (None, ""):
        return []
    items = value if isinstance(value, list | tuple) else [value]
    return [str(v) for v in items if v not in (None, "")]


def parse_rendering(query: Mapping[str, Any], band_count: int | None = None) -> Rendering:
    """The rendering a request's (or a saved layer's) parameters name.

    Args:
        query: the parameters by name; a repeatable one (``bidx``, ``rescale``) as a list.
        band_count: the layer's bands, when known: a band past them is refused.

    Raises:
        InvalidInputError: a value out of its bounds (``detail.parameter`` names it).
    """
    bidx = _bidx(_many(query, "bidx"), band_count)
    expression: str | None = None
    expression_bands: tuple[int, ...] = ()
    if (text := _one(query, "expression")) is not None:
        expression, expression_bands = _expression(text, band_count)
        if bidx:
            raise _invalid("bidx", "give bidx or expression, not both")
    name = _one(query, "colormap_name")
    if name is not None:
        name = name.lower()
        if name not in cmap.list():
            names = ", ".join(sorted(cmap.list()))
            raise _invalid("colormap_name", f"unknown colour map; one of {names}", name)
    colormap = _colormap(text) if (text := _one(query, "colormap")) is not None else ()
    if name and colormap:
        raise _invalid("colormap", "give colormap_name or colormap, not both")
    algorithm: str | None = None
    algorithm_params: tuple[tuple[str, float], ...] = ()
    if (text := _one(query, "algorithm")) is not None:
        algorithm, algorithm_params = _algorithm(text, _one(query, "algorithm_params"))
        reads = len(expression_bands) if expression else len(bidx)
        blocks = len(expression.split(";")) if expression else reads
        if blocks > 1:
            raise _invalid("algorithm", f"{algorithm} needs one band; {blocks} given")
    elif _one(query, "algorithm_params") is not None:
        raise _invalid("algorithm_params", "given without an algorithm")
    nodata = _number(text, "nodata", nan=True) if (text := _one(query, "nodata")) else None
    resampling = None
    if (text := _one(query, "resampling")) is not None:
        try:
            resampling = LayerResampling(text.lower())
        except ValueError:
            names = ", ".join(LayerResampling)
            raise _invalid("resampling", f"must be one of {names}", text) from None
    return Rendering(
        bidx=bidx,
        expression=expression,
        rescale=_rescale(_many(query, "rescale")),
        colormap_name=name,
        colormap=colormap,
        algorithm=algorithm,
        algorithm_params=algorithm_params,
        nodata=nodata,
        resampling=resampling,
        expression_bands=expression_bands,
    )


def rendering_from_json(saved: Mapping[str, Any]) -> Rendering:
    """A rendering saved by :meth:`Rendering.to_json`."""
    query: dict[str, Any] = dict(saved)
    for name in ("colormap", "algorithm_params"):
        if name in query and not isinstance(query[name], str):
            query[name] = _compact(query[name])
    return parse_rendering(query)
