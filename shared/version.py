"""The version of mapsvc: ``pyproject.toml`` is its one source (read from the installed package).

Shown by ``GET /health``, the OpenAPI document and ``mapsvc --version``; ``CHANGELOG.md`` says
what each version changed.
"""

from __future__ import annotations

from importlib.metadata import version

__all__ = ["VERSION"]

VERSION = version("mapsvc")
