"""Pydantic building blocks for reading provider answers: lenient fields, one error on failure.

A model names only the fields we use and ignores the rest. Providers send numbers as strings
(Nominatim's coordinates) and leave fields out or null, so the field types below coerce the way
the answers need: :data:`Text` makes any value a string (missing or null: ``""``), :data:`Num`
makes any value a finite float, :data:`DictList` drops whatever in a list is not an object;
:func:`parse` turns a misfit into :class:`~shared.errors.UpstreamBadAnswerError`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from shared.errors import UpstreamBadAnswerError

__all__ = [
    "Answer",
    "Box",
    "DictList",
    "ListOrEmpty",
    "Num",
    "ObjectOrEmpty",
    "OptionalObject",
    "Text",
    "parse",
]

_M = TypeVar("_M", bound="Answer")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _num(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("not a number") from None
    if not math.isfinite(number):
        raise ValueError("not finite")
    return number


def _dicts(value: Any) -> list[Any]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _object_or_none(value: Any) -> Any:
    return value if isinstance(value, dict) and value else None


def _object_or_empty(value: Any) -> Any:
    return value if isinstance(value, dict) else {}


def _list_or_empty(value: Any) -> Any:
    return value if isinstance(value, list) else []


def _four_or_none(value: Any) -> Any:
    return value if isinstance(value, list) and len(value) == 4 else None


#: any value as a string; missing or null is ``""``
Text = Annotated[str, BeforeValidator(_text)]
#: a finite number, also from a string
Num = Annotated[float, BeforeValidator(_num)]
#: the objects of a list (other items dropped); not a list: ``[]``
DictList = BeforeValidator(_dicts)
#: an object, or None when it is missing, empty or not an object
OptionalObject = BeforeValidator(_object_or_none)
#: an object; missing or not an object: ``{}`` (so the model's defaults)
ObjectOrEmpty = BeforeValidator(_object_or_empty)
#: a list; missing or not a list: ``[]``
ListOrEmpty = BeforeValidator(_list_or_empty)
#: four numbers (a bounding box in the provider's order), or None when it is not four values
Box = Annotated[list[Num] | None, BeforeValidator(_four_or_none)]


class Answer(BaseModel):
    """Base of provider answer models: extra fields ignored, values frozen."""

    model_config = ConfigDict(extra="ignore", frozen=True)


def parse(model: type[_M], data: Any, provider: str) -> _M:
    """``data`` read as ``model``.

    Args:
        model: the answer model.
        data: the decoded JSON (or a part of it).
        provider: the provider's name, for the error.

    Returns:
        The model.

    Raises:
        UpstreamBadAnswerError: ``data`` does not fit the model.
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the answer"
        raise UpstreamBadAnswerError(
            f"provider {provider}: unexpected answer ({where}: {first['msg']})", provider=provider
        ) from None
