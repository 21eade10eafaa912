"""Tile formats and variants: ``<y>[@2x].<ext>`` in URLs and cache keys, and their URL templates.

A tile is asked for as ``<y>.png``, ``<y>.webp``, ``<y>.jpg`` (or ``<y>.jpeg``), each with an
optional ``@2x`` before the extension: the same tile drawn at twice the pixels (512 px, Mapnik's
``scale_factor`` 2) for high-density screens. Each variant is cached under its own name beside
the PNG, ``<z>/<x>/<y>[@2x].<ext>`` (``.jpeg`` shares the ``.jpg`` file).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.errors import InvalidInputError

__all__ = [
    "RETINA",
    "TileFormat",
    "PNG_TILE",
    "VARIANTS",
    "TileVariant",
    "parse_variant",
    "tile_url_template",
    "tile_url_templates",
    "tilejson_url",
]

#: the ``@2x`` of a tile's last URL segment, and the one scale besides 1 that is served
RETINA = "@2x"
_RETINA_SCALE = 2


class TileFormat(StrEnum):
    """An image format of tiles; its value is the extension of its URLs and cache keys."""

    PNG = "png"
    WEBP = "webp"
    JPEG = "jpg"

    @property
    def media_type(self) -> str:
        """The ``Content-Type`` of a tile of this format."""
        return _MEDIA_TYPES[self]

    @property
    def has_alpha(self) -> bool:
        """Whether the format keeps transparency (JPEG does not: see ``JPEG_BACKGROUND``)."""
        return self is not TileFormat.JPEG

    @classmethod
    def from_extension(cls, extension: str) -> TileFormat:
        """The format of a URL's or key's extension: ``png``, ``webp``, ``jpg`` or ``jpeg``.

        Raises:
            InvalidInputError: any other extension.
        """
        found = _EXTENSIONS.get(extension)
        if found is None:
            raise InvalidInputError(
                f"unknown tile format {extension!r}: {', '.join(_EXTENSIONS)}",
                parameter="format",
                value=extension,
            )
        return found


_MEDIA_TYPES = {
    TileFormat.PNG: "image/png",
    TileFormat.WEBP: "image/webp",
    TileFormat.JPEG: "image/jpeg",
}
_EXTENSIONS = {**{f.value: f for f in TileFormat}, "jpeg": TileFormat.JPEG}


@dataclass(frozen=True)
class TileVariant:
    """How a tile is drawn and encoded: its format, and its scale (2 for ``@2x``)."""

    format: TileFormat = TileFormat.PNG
    scale: int = 1

    @property
    def suffix(self) -> str:
        """What follows the row in URLs and cache keys: ``.png``, ``@2x.webp``, …"""
        return f"{RETINA if self.scale == _RETINA_SCALE else ''}.{self.format.value}"

    @property
    def name(self) -> str:
        """The variant as a word: ``png``, ``webp@2x``, …"""
        return f"{self.format.value}{RETINA if self.scale == _RETINA_SCALE else ''}"

    @classmethod
    def from_name(cls, name: str, parameter: str = "format") -> TileVariant:
        """The variant named ``name``, as :attr:`name` gives it (``jpeg`` too).

        Raises:
            InvalidInputError: not a variant's name (``detail.parameter``: ``parameter``).
        """
        extension, retina, rest = name.partition(RETINA)
        try:
            if rest:
                raise InvalidInputError(f"unknown tile format {name!r}")
            return cls(TileFormat.from_extension(extension), _RETINA_SCALE if retina else 1)
        except InvalidInputError as exc:
            exc.detail["parameter"] = parameter
            raise


#: the tile of spec 4.1: PNG, 256 px
PNG_TILE = TileVariant()
#: every variant served, PNG first
VARIANTS = tuple(TileVariant(f, scale) for f in TileFormat for scale in (1, _RETINA_SCALE))


def parse_variant(y: str, extension: str) -> tuple[str, TileVariant]:
    """The row and the variant of a tile URL's last segment, ``<y>[@2x].<extension>``.

    Args:
        y: the segment before its extension, ``110`` or ``110@2x`` (the row is checked by
            :func:`~shared.base.grid.parse_tile`).
        extension: ``png``, ``webp``, ``jpg`` or ``jpeg``.

    Raises:
        InvalidInputError: an unknown extension, or a scale other than ``@2x``.
    """
    tile_format = TileFormat.from_extension(extension)
    row, at, scale = y.partition("@")
    if not at:
        return row, TileVariant(tile_format)
    if f"@{scale}" != RETINA:
        raise InvalidInputError(
            f"a tile is <y>.<format> or <y>{RETINA}.<format>", parameter="y", value=y
        )
    return row, TileVariant(tile_format, _RETINA_SCALE)


def tile_url_template(
    url_prefix: str, style: str, lang: str, variant: TileVariant = PNG_TILE
) -> str:
    """The tile URL template of a layer in one variant, under the API's ``url_prefix``.

    The PNG template is spec 2.2's ``url``:
    ``<url_prefix>/rtile/<style>/<lang>/{z}/{x}/{y}.png``.
    """
    return f"{url_prefix}/rtile/{style}/{lang}/{{z}}/{{x}}/{{y}}{variant.suffix}"


def tile_url_templates(url_prefix: str, style: str, lang: str) -> dict[str, str]:
    """The tile URL templates of a layer in every variant, by name (``png``, ``webp@2x``, …)."""
    return {v.name: tile_url_template(url_prefix, style, lang, v) for v in VARIANTS}


def tilejson_url(url_prefix: str, style: str, lang: str) -> str:
    """The URL of a layer's TileJSON under the API's ``url_prefix``, its tiles in ``lang``:
    ``<url_prefix>/rtile/<style>/tilejson.json?lang=<lang>``."""
    return f"{url_prefix}/rtile/{style}/tilejson.json?lang={lang}"
