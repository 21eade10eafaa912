"""The tables of ``docs/settings.md``, made from the settings classes of `shared.settings`.

Every variable's row (name, default, meaning) comes from its field, so the page cannot drift
from the code: ``python -m shared.settings_doc`` rewrites the part of the page between the two
markers, and a test checks that the page holds what it would write. The rest of the page is
written by hand.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path

from pydantic.fields import FieldInfo

from shared.settings import (
    KEYED_PROVIDERS,
    PROVIDER_DEFAULTS,
    Concern,
    Providers,
    ProviderSettings,
    Settings,
)

__all__ = ["BEGIN", "END", "PAGE", "page", "tables"]

#: The page whose tables are made here.
PAGE = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
#: The line before the made tables, and the line after them.
BEGIN = "<!-- made by `python -m shared.settings_doc` from shared/settings.py: edit the classes -->"
END = "<!-- end of the made tables -->"


def _default(value: object) -> str:
    """A default as the page shows it: ``unset``, ``empty``, or the value as it would be set."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple | frozenset):
        items = sorted(value) if isinstance(value, frozenset) else value
        value = ",".join(items)
    return f"`{value}`" if value != "" else "empty"


def _row(variable: str, default: object, field: FieldInfo) -> str:
    meaning = (field.description or "").replace("|", "\\|")
    return f"| `{variable}` | {_default(default)} | {meaning} |"


def _fields(cls: type[Concern]) -> Iterator[str]:
    """The rows of the fields of ``cls`` that are settings, not concerns nor providers."""
    for name, field in cls.model_fields.items():
        if name not in Settings.concerns and name not in PROVIDER_DEFAULTS:
            yield _row(cls.variable(name), field.default, field)


def _providers() -> Iterator[str]:
    """The rows of each provider's variables (``MAPSVC_<NAME>_*``), with its own defaults."""
    for provider, defaults in PROVIDER_DEFAULTS.items():
        for name, field in ProviderSettings.model_fields.items():
            if name != "api_key" or provider in KEYED_PROVIDERS:
                variable = f"MAPSVC_{provider}_{ProviderSettings.key(name)}".upper()
                yield _row(variable, defaults.get(name, field.default), field)


def _table(title: str, rows: Iterable[str]) -> str:
    return "\n".join(
        [f"### {title}", "", "| variable | default | meaning |", "|---|---|---|", *rows]
    )


def tables() -> str:
    """The tables of every variable, one per concern: ``Settings``'s core fields first."""
    made = [_table("`settings` (`Settings`)", _fields(Settings))]
    for attr, cls in Settings.concerns.items():
        rows = chain(_fields(cls), _providers() if cls is Providers else ())
        made.append(_table(f"`settings.{attr}` (`{cls.__name__}`)", rows))
    return "\n\n".join(made)


def page(text: str) -> str:
    """``text`` (the page) with the tables between `BEGIN` and `END` made anew.

    Raises:
        ValueError: the page lacks a marker.
    """
    head, begin, rest = text.partition(BEGIN + "\n")
    _, end, tail = rest.partition(END + "\n")
    if not begin or not end:
        raise ValueError(f"the page needs the lines {BEGIN!r} and {END!r}")
    return f"{head}{BEGIN}\n\n{tables()}\n\n{END}\n{tail}"


def main(argv: list[str]) -> None:
    """Rewrite the tables of the page named by ``argv`` (default: `PAGE`)."""
    path = Path(argv[0]) if argv else PAGE
    path.write_text(page(path.read_text()))


if __name__ == "__main__":
    main(sys.argv[1:])
