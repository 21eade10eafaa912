"""The parameters of a route as a pydantic model: one declaration parses and documents them.

A route's ``query`` model (:class:`Query`) holds its path and query parameters (a field whose
name is in the route's path is a path parameter); :func:`parse` reads a request into it, and the
OpenAPI document is the model's JSON schema (``api.openapi.document``). The kinds of value the
spec uses are types here: :data:`Flag` (``1``/``0``, ``true``/``false``, ``yes``/``no``),
:data:`Lang` (a served language, the default when absent), :data:`Srs` (an authority code).
A bound that is a setting (``MAPSVC_TILE_MAX_SIZE``) is :class:`AtMost`: checked when parsing,
stated in the document with the running value.

A value the model refuses is a ``400`` in the one error shape, ``detail.parameter`` naming it.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from shared.errors import InvalidInputError
from shared.params import BOX_PATTERN, SRS_PATTERN, box_numbers, parse_lang, parse_srs
from shared.raster.paths import MAX_ID_CHARS, RASTER_LAYER_EXAMPLE, decode_id
from shared.settings import LANG_PATTERN, Settings

__all__ = [
    "AtMost",
    "Box",
    "Clamped",
    "Declared",
    "OneOf",
    "Flag",
    "JobQuery",
    "KNOWN_EVERYWHERE",
    "Lang",
    "Query",
    "RasterId",
    "Srs",
    "Text",
    "declared_names",
    "job_id",
    "layer_id",
    "parse",
    "raster_id",
    "refuse_unknown",
    "stream_entry",
    "style_id",
    "setting_bounds",
    "setting_schemas",
]

M = TypeVar("M", bound=BaseModel)

_TRUE = frozenset({"1", "true", "yes"})
_FALSE = frozenset({"0", "false", "no", ""})


@dataclass(frozen=True)
class AtMost:
    """A number's upper bound that is a setting: ``AtMost("tiles.max_size")``."""

    setting: str

    def value(self, settings: Settings) -> int:
        """The bound under ``settings``."""
        found: int = operator.attrgetter(self.setting)(settings)
        return found

    def schema(self, settings: Settings) -> dict[str, Any]:
        """What the bound adds to the parameter's schema under ``settings``."""
        return {"maximum": self.value(settings)}


@dataclass(frozen=True)
class Clamped:
    """A number's upper bound that is a setting, beyond which the handler takes the bound
    (OGC API – Features' ``limit``: not an error): stated in the document, not checked."""

    setting: str

    def schema(self, settings: Settings) -> dict[str, Any]:
        """What the bound adds to the parameter's schema under ``settings``."""
        return {"maximum": operator.attrgetter(self.setting)(settings)}


@dataclass(frozen=True)
class Declared:
    """A parameter declared once in the document's ``components.parameters`` under ``name``
    and referenced where it is used (clients such as QGIS read OGC API's ``limit`` there)."""

    name: str


@dataclass(frozen=True)
class OneOf:
    """A text among the values of a setting (checked by the type's validator):
    ``OneOf("languages")``."""

    setting: str

    def schema(self, settings: Settings) -> dict[str, Any]:
        """The setting's values as the parameter's ``enum`` under ``settings``."""
        return {"enum": sorted(operator.attrgetter(self.setting)(settings))}


#: the query parameters every route knows: the credential (``api.authn`` reads it)
KNOWN_EVERYWHERE = frozenset({"api_key"})


class Query(BaseModel):
    """The parameters of a route: path and query, read from text.

    A query parameter the model does not define is refused by the endpoint's wrapper
    (:func:`refuse_unknown`). Defaults are validated, so a :data:`Lang` left out becomes the
    default language.
    """

    model_config = ConfigDict(
        extra="ignore", validate_default=True, frozen=True, allow_inf_nan=False
    )

    @property
    def reads_catalogue_again(self) -> bool:
        """Whether the vector layer the request names is looked up in the catalogue read
        afresh (``nocache``, ``reload``): the endpoint's wrapper asks, as it resolves it."""
        return False


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise PydanticCustomError("flag", "must be 1 or 0")


#: a flag (spec 4.0: ``1`` or ``0``; ``true``/``false`` and ``yes``/``no`` are taken too)
Flag = Annotated[
    bool, BeforeValidator(_flag), WithJsonSchema({"type": "string", "enum": ["0", "1"]})
]


def _settings(info: ValidationInfo) -> Settings:
    context = info.context
    assert isinstance(context, Mapping), "parse the model with api.fields.parse"
    settings: Settings = context["settings"]
    return settings


def _lang(value: object, info: ValidationInfo) -> str:
    settings = _settings(info)
    name = info.field_name or "lang"
    return parse_lang(str(value or settings.default_lang), settings.languages, name)


#: a label language the service serves (``MAPSVC_LANGUAGES``); absent: the default language
Lang = Annotated[
    str,
    BeforeValidator(_lang),
    WithJsonSchema({"type": "string", "pattern": LANG_PATTERN}),
    OneOf("languages"),
]


def _srs(value: object, info: ValidationInfo) -> str:
    return parse_srs(str(value), info.field_name or "srs")


#: a CRS by authority code (``EPSG:3857``, ``esri:102100``), spelt ``EPSG:3857`` once parsed
Srs = Annotated[
    str, BeforeValidator(_srs), WithJsonSchema({"type": "string", "pattern": SRS_PATTERN})
]


class JobQuery(Query):
    """The parameters of a route that starts a job (``async``, then the route's own)."""

    run_async: Flag = Field(
        False,
        alias="async",
        description="1: answer 202 with the job at once instead of waiting for it",
    )


def Text(max_length: int = 500, **kw: Any) -> Any:  # noqa: N802 - reads as a type
    """A non-empty text of at most ``max_length`` characters (``Field`` keywords pass on)."""
    return Field(min_length=1, max_length=max_length, **kw)


_JOB_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_ENTRY_ID = r"^[0-9]{1,20}(-[0-9]{1,20})?$"
_RASTER_ID = rf"^[A-Za-z0-9_-]{{1,{MAX_ID_CHARS}}}$"


def _raster_id(value: object, info: ValidationInfo) -> str:
    text = str(value)
    try:
        decode_id(text)  # the id of a path in normal form, inside the raster root, or 400
    except InvalidInputError as exc:
        exc.detail.setdefault("parameter", info.field_name or "id")
        raise
    return text


#: a raster layer's id: URL-safe base64 of its path in normal form
RasterId = Annotated[
    str,
    BeforeValidator(_raster_id),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS, "pattern": _RASTER_ID}
    ),
]


def raster_id(description: str = "Raster (layer) id: URL-safe base64 of its path") -> Any:
    """The field of a :data:`RasterId` (a path parameter, say)."""
    return Field(description=description, examples=[RASTER_LAYER_EXAMPLE])


def style_id(description: str = "Layer (style) id") -> Any:
    """A map style's id: a raster layer's id, or any name of the same letters (an unknown one
    is the route's ``404``, not a ``400``)."""
    return Field(
        min_length=1,
        max_length=MAX_ID_CHARS,
        pattern=_RASTER_ID,
        description=description,
        examples=[RASTER_LAYER_EXAMPLE],
    )


def _box(value: object, info: ValidationInfo) -> str:
    text = str(value)
    box_numbers(text, info.field_name or "bbox")  # its CRS's area is checked where it is known
    return text


#: a box as text, ``minx,miny,maxx,maxy``: four finite numbers with min < max
Box = Annotated[
    str, BeforeValidator(_box), WithJsonSchema({"type": "string", "pattern": BOX_PATTERN})
]


def layer_id(description: str = "Vector layer id (`schema.table` or an alias)") -> Any:
    """A vector layer's id."""
    return Text(200, description=description, examples=["public.countries"])


def job_id() -> Any:
    """A job's id."""
    return Field(pattern=_JOB_ID, max_length=36, description="Job id (a lowercase UUID)")


def stream_entry(description: str = "Resume after this stream entry id") -> Any:
    """An entry id of an event stream, to resume after (optional)."""
    return Field(None, pattern=_ENTRY_ID, max_length=41, description=description)


@functools.cache
def _markers(model: type[BaseModel]) -> dict[str, list[AtMost | Clamped | OneOf]]:
    """The fields of ``model`` whose schema a setting completes, by parameter name."""
    found: dict[str, list[AtMost | Clamped | OneOf]] = {}
    for name, field in model.model_fields.items():
        for marker in field.metadata:
            if isinstance(marker, AtMost | Clamped | OneOf):
                found.setdefault(field.alias or name, []).append(marker)
    return found


def setting_bounds(model: type[BaseModel], settings: Settings) -> dict[str, int]:
    """The upper bound of each parameter of ``model`` bounded by a setting, under ``settings``."""
    return {
        name: marker.value(settings)
        for name, markers in _markers(model).items()
        for marker in markers
        if isinstance(marker, AtMost)
    }


def declared_names(model: type[BaseModel]) -> dict[str, str]:
    """The parameters of ``model`` declared in the document's components: their component's
    name, by parameter name."""
    return {
        field.alias or name: marker.name
        for name, field in model.model_fields.items()
        for marker in field.metadata
        if isinstance(marker, Declared)
    }


def setting_schemas(model: type[BaseModel], settings: Settings) -> dict[str, dict[str, Any]]:
    """What the settings add to each parameter's schema of ``model`` (a bound, an enum)."""
    return {
        name: {k: v for marker in markers for k, v in marker.schema(settings).items()}
        for name, markers in _markers(model).items()
    }


def parse(
    model: type[M], path: Mapping[str, Any], query: Mapping[str, str], settings: Settings
) -> M:
    """The parameters of a request as ``model``: the path's, then the query's non-empty ones
    (an empty parameter is an absent one; of a repeated one, the last counts).

    Raises:
        InvalidInputError: a value the model refuses, or a setting's bound exceeded (400,
            ``detail.parameter`` names it).
    """
    data: dict[str, Any] = {
        name: value for name, value in query.items() if value != "" and name not in KNOWN_EVERYWHERE
    }
    getlist = getattr(query, "getlist", None)
    for name in _lists(model):  # a repeatable parameter: every value, in order
        values = getlist(name) if getlist is not None else [query.get(name, "")]
        data.pop(name, None)
        if given := [value for value in values if value != ""]:
            data[name] = given
    data.update(path)
    try:
        parsed = model.model_validate(data, context={"settings": settings})
    except ValidationError as exc:
        raise _invalid(model, exc.errors()[0]) from None
    for name, most in setting_bounds(model, settings).items():
        value = getattr(parsed, _attribute(model, name))
        if value is not None and value > most:
            lo = _bounds(model, name)[0]
            raise InvalidInputError(
                f"{name} must be {_range(lo, most)}", parameter=name, value=value
            )
    return parsed


def refuse_unknown(
    model: type[BaseModel] | None,
    query: Mapping[str, str],
    path_names: frozenset[str] = frozenset(),
) -> None:
    """Refuse the parameters of ``query`` that ``model`` (None: no model) does not define, but
    for :data:`KNOWN_EVERYWHERE` (OGC API – Features' ``/req/core/query-param-unknown``, on
    every route: a misspelt ``dryrun`` must not run the real thing), and those that name a path
    parameter (``path_names``: the path says it, a query does not say it again).

    Raises:
        InvalidInputError: 400 naming them (``detail.parameter``: the first) and the known ones.
    """
    known = ((frozenset() if model is None else _names(model)) - path_names) | KNOWN_EVERYWHERE
    unknown = sorted(name[:50] for name in query if name not in known)
    if unknown:
        said = ", ".join(unknown[:5]) + (
            f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        )
        raise InvalidInputError(
            f"unknown parameter{'s' if len(unknown) > 1 else ''} {said}; this route knows "
            f"{', '.join(sorted(known))}",
            parameter=unknown[0],
        )


@functools.cache
def _names(model: type[BaseModel]) -> frozenset[str]:
    """The parameter names of ``model`` (its fields' aliases, or names)."""
    return frozenset(field.alias or name for name, field in model.model_fields.items())


@functools.cache
def _lists(model: type[BaseModel]) -> tuple[str, ...]:
    """The repeatable parameters of ``model`` (its fields that hold a list)."""
    return tuple(
        field.alias or name
        for name, field in model.model_fields.items()
        if "list[" in str(field.annotation)
    )


def _attribute(model: type[BaseModel], name: str) -> str:
    """The attribute of ``model`` holding parameter ``name`` (its alias, or itself)."""
    return next((a for a, f in model.model_fields.items() if (f.alias or a) == name), name)


@functools.cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    properties: dict[str, Any] = model.model_json_schema(by_alias=True)["properties"]
    return properties


def _bounds(model: type[BaseModel], name: str) -> tuple[Any, Any]:
    """The documented least and greatest value of parameter ``name`` (None: unbounded)."""
    found: dict[str, Any] = _schema(model).get(name, {})
    found = next((s for s in found.get("anyOf", [found]) if s.get("type") != "null"), {})
    return found.get("minimum"), found.get("maximum")


def _range(lo: object, hi: object) -> str:
    if lo is None:
        return f"at most {hi}"
    if hi is None:
        return f"at least {lo}"
    return f"{lo}..{hi}"


_MESSAGES = {
    "missing": "{name} is required",
    "int_parsing": "{name} must be an integer",
    "int_from_float": "{name} must be an integer",
    "float_parsing": "{name} must be a number",
    "finite_number": "{name} must be a finite number",
    "string_too_short": "{name} must not be empty",
    "string_too_long": "{name} is at most {max_length} characters",
    "string_pattern_mismatch": "{name} does not match {pattern}",
}


def _invalid(model: type[BaseModel], error: ErrorDetails) -> InvalidInputError:
    """The ``400`` of the first value ``model`` refused."""
    name = str(error["loc"][0]) if error["loc"] else "query"
    kind, context = error["type"], error.get("ctx", {})
    if kind in {"greater_than_equal", "less_than_equal", "greater_than", "less_than"}:
        message = f"{name} must be {_range(*_bounds(model, name))}"
    elif kind in {"literal_error", "enum"}:
        message = f"{name} must be one of {context.get('expected', '')}"
    elif kind in _MESSAGES:
        message = _MESSAGES[kind].format(name=name, **context)
    else:
        message = f"{name} {error['msg']}"
    given = error.get("input")
    detail = {"value": given[:64]} if isinstance(given, str) else {}
    return InvalidInputError(message, parameter=name, **detail)
