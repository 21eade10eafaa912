"""The table of operations: one :class:`~api.openapi.operation.Operation` per route name.

Each module describes the routes of the ``api.routes`` module of its name.
"""

from __future__ import annotations

from api.openapi.operation import Operation
from api.openapi.operations import (
    auth,
    jobs,
    pdf,
    providers,
    raster,
    system,
    tiles,
    vector,
    web,
)

__all__ = ["operations"]


def operations(tile_max_size: int, max_features: int) -> dict[str, Operation]:
    """Every route's operation by route name, with the limits the parameters state."""
    return {
        **web.operations(),
        **system.operations(),
        **jobs.operations(),
        **raster.operations(),
        **tiles.operations(tile_max_size),
        **vector.operations(max_features),
        **pdf.operations(),
        **providers.operations(),
        **auth.operations(),
    }
