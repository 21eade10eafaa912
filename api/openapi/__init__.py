"""The OpenAPI 3.1 document of the API, generated from the endpoints (``api.endpoint``).

``document`` builds it from each endpoint's declaration; response bodies are pydantic models
(``models``, ``auth_models``) whose JSON schemas go to ``components.schemas``; ``answers``
holds the response objects (the one error shape, JSON bodies, bytes, a job's ``202``).
"""

from __future__ import annotations

from api.openapi.document import openapi_document, openapi_path

__all__ = ["openapi_document", "openapi_path"]
