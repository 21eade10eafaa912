"""The operation of the front door (``api.routes.web``; the pages at the root are not API)."""

from __future__ import annotations

from api.openapi.models import FrontDoor, ref
from api.openapi.operation import Operation
from api.openapi.parameters import param

__all__ = ["operations"]


def operations() -> dict[str, Operation]:
    """The front door's operation by name."""
    return {
        "get_front": Operation(
            "The front door: name, version, links to the viewer, the docs, this document",
            "system",
            [
                param(
                    "query",
                    "f",
                    {"type": "string", "enum": ["json", "html"]},
                    "The answer's form; unset: by `Accept` (a browser, naming HTML, gets HTML)",
                )
            ],
            {
                "200": {
                    "description": "HTML for a browser, JSON for a client that asks for it",
                    "content": {
                        "application/json": {"schema": ref(FrontDoor)},
                        "text/html": {"schema": {"type": "string"}},
                    },
                }
            },
        ),
    }
