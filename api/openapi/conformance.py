"""The answers against the document (``MAPSVC_CHECK_ANSWERS``, the test suite's mode).

:class:`AnswerCheck` reads every JSON answer of an endpoint and validates it against the model
the endpoint documents for that status (its answers, its job's ``202``, its errors: one error
shape), extra fields refused: an answer that drifted from the document is a ``500`` naming
the drift, so every test that calls a route checks the document too. Other media types (images,
event streams, XML) and statuses the endpoint does not document pass as they are.
"""

from __future__ import annotations

import json
import logging

from pydantic import BaseModel, ValidationError
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from api.endpoint import ENDPOINT_KEY, Endpoint
from api.middleware import HttpMiddleware
from api.openapi.document import responses
from api.openapi.models import referenced_model

__all__ = ["AnswerCheck", "answer_models"]

log = logging.getLogger(__name__)


#: the models of each endpoint's answers, by its name and the status
_MODELS: dict[tuple[str, int], tuple[type[BaseModel], ...]] = {}


def answer_models(endpoint: Endpoint, status: int) -> tuple[type[BaseModel], ...]:
    """The models a JSON answer of ``endpoint`` with ``status`` may be (any one of them); none:
    not a documented JSON answer."""
    key = (endpoint.name, status)
    if key not in _MODELS:
        found = responses(endpoint).get(str(status), {})
        schema = found.get("content", {}).get("application/json", {}).get("schema", {})
        refs = [schema] if "$ref" in schema else schema.get("anyOf", [])
        _MODELS[key] = tuple(referenced_model(r["$ref"]) for r in refs if "$ref" in r)
    return _MODELS[key]


def _drift(models: tuple[type[BaseModel], ...], body: bytes) -> str | None:
    """Why ``body`` is none of ``models`` (None: it is one)."""
    try:
        data = json.loads(body)
    except ValueError:
        return "not JSON"
    whys = []
    for model in models:
        try:
            model.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            whys.append(f"{model.__name__}: {where}: {first['msg']}")
        else:
            return None
    return "; ".join(whys)


class AnswerCheck(HttpMiddleware):
    """Hold each JSON answer of an endpoint until it is whole, and send a ``500`` instead when
    it is not the model its endpoint documents for its status."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        start: Message | None = None
        chunks: list[bytes] = []
        models: tuple[type[BaseModel], ...] = ()

        async def checked(message: Message) -> None:
            nonlocal start, models
            if message["type"] == "http.response.start":
                endpoint = scope.get(ENDPOINT_KEY)
                media = Headers(raw=message["headers"]).get("content-type", "")
                if isinstance(endpoint, Endpoint) and media.startswith("application/json"):
                    models = answer_models(endpoint, message["status"])
                if not models:
                    await send(message)
                    return
                start = message
                return
            if start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            why = _drift(models, body)
            if why is not None:
                log.error(
                    "%s %s: the answer is not the document's: %s",
                    scope["method"],
                    scope["path"],
                    why,
                )
                body = json.dumps(
                    {"error": {"code": "internal", "message": why[:500], "detail": {}}}
                ).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ]
                start = {**start, "status": 500, "headers": headers}
            await send(start)
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, checked)
