"""The OpenAPI 3.1 document of the API, built from the routes and small typed pieces.

Each route of ``api.routes.ROUTES`` is described by the :class:`Operation` of its name (the
table is ``api.openapi.operations``, one module per routes module); the path and method come
from the route itself. Response bodies are pydantic models (``api.openapi.models``) whose JSON
schemas go to ``components.schemas``; every failure is ``ErrorResponse``. Parameter builders and
shared parameters are in ``api.openapi.parameters``.
"""

from __future__ import annotations

from api.openapi.document import openapi_document, openapi_path
from api.openapi.operation import Operation

__all__ = ["Operation", "openapi_document", "openapi_path"]
