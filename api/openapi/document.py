"""The OpenAPI 3.1 document, built from the endpoints (``api.endpoint``), never written apart.

Each endpoint gives its operation: the path and method, its ``query`` model's JSON schema as
parameters (a field named in the path is a path parameter; a bound that is a setting shows its
running value), its body model, its answer, the refusals its rule and budget may give and the
errors it declares. Models referenced go to ``components.schemas``, parameters marked
:class:`~api.fields.Declared` to ``components.parameters``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from api.access import Rule
from api.endpoint import Endpoint
from api.fields import JobQuery, declared_names, setting_schemas
from api.openapi.answers import error_answer, job_accepted, json_body, request_body
from api.openapi.models import Schema, components
from shared.settings import Settings
from shared.version import VERSION

__all__ = ["openapi_document", "openapi_path", "operation", "responses"]

#: the key of a parameter object naming the component it is declared as
_DECLARED = "x-component"
_JOB_PARAMETERS = frozenset(f.alias or n for n, f in JobQuery.model_fields.items())
#: the errors of a route that starts a job: no such layer, a run going on, a plan too large
_JOB_ERRORS = (404, 409, 422)


def openapi_path(route_path: str) -> str:
    """A Starlette route path as an OpenAPI path: ``{path:path}`` becomes ``{path}``."""
    return "/".join(
        part.split(":", 1)[0] + "}" if part.startswith("{") and ":" in part else part
        for part in route_path.split("/")
    )


#: every way to send credentials: any one of them is enough
_CREDENTIALS: list[Schema] = [{"bearer": []}, {"apiKey": []}, {"basic": []}, {"oauth2": []}]


def _security_schemes(prefix: str) -> Schema:
    token_url = f"{prefix}/oauth/token"
    return {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "An access token (`/oauth/token`, `POST /api/auth`) or an API key",
        },
        "apiKey": {"type": "apiKey", "in": "query", "name": "api_key"},
        "basic": {"type": "http", "scheme": "basic", "description": "A user's login and password"},
        "oauth2": {
            "type": "oauth2",
            "flows": {
                "password": {"tokenUrl": token_url, "refreshUrl": token_url, "scopes": {}},
                "authorizationCode": {
                    "authorizationUrl": f"{prefix}/oauth/authorize",
                    "tokenUrl": token_url,
                    "refreshUrl": token_url,
                    "scopes": {},
                },
            },
        },
    }


def _security(rule: Rule, own_credentials: bool) -> list[Schema] | None:
    """The credentials an endpoint takes (None: the document's, any one of them)."""
    if own_credentials or (rule.role is None and not rule.public):
        return []
    if rule.public:  # `{}`: public layers need none
        return [{}, *_CREDENTIALS]
    return None


def _refusals(endpoint: Endpoint) -> set[int]:
    """The errors of an endpoint: its own, its rule's and budget's (429: every endpoint has
    one), and always 400 and 503."""
    rule = endpoint.rule
    found = {400, 503, *endpoint.errors}
    if endpoint.job is not None:
        found |= set(_JOB_ERRORS)
    if rule.role is not None:
        found |= {401, 403} | ({404} if rule.layers else set())
    return found | {429}


def _schema_of(prop: Schema) -> Schema:
    """A parameter's schema from a model property: no title, no ``null`` alternative."""
    schema = {k: v for k, v in prop.items() if k not in {"title", "description", "examples"}}
    alternatives = [s for s in schema.pop("anyOf", []) if s.get("type") != "null"]
    if len(alternatives) == 1:
        schema.update(alternatives[0])
    elif alternatives:
        schema["anyOf"] = alternatives
    default = schema.pop("default", None)
    if isinstance(default, bool):  # a flag: documented as its text
        schema["default"] = "1" if default else "0"
    elif default not in (None, ""):
        schema["default"] = default
    return schema


def parameters(endpoint: Endpoint, settings: Settings) -> list[Schema]:
    """The parameter objects of an endpoint: its query model's fields, then its headers."""
    found: list[Schema] = []
    model = endpoint.query
    if model is not None:
        schema = model.model_json_schema(by_alias=True)
        required = set(schema.get("required", []))
        completed = setting_schemas(model, settings)
        declared = declared_names(model)
        # the path's parameters first, in its order; those of every job route last
        path = re.findall(r"{(\w+)", endpoint.path)
        names = sorted(
            schema["properties"],
            key=lambda name: (
                path.index(name) if name in path else len(path) + (name in _JOB_PARAMETERS)
            ),
        )
        for name in names:
            prop = schema["properties"][name]
            where = "path" if name in endpoint.path_names else "query"
            parameter: Schema = {
                "name": name,
                "in": where,
                "required": where == "path" or name in required,
                "description": prop.get("description", ""),
                "schema": _schema_of(prop),
            }
            parameter["schema"].update(completed.get(name, {}))
            if prop.get("examples"):
                parameter["example"] = prop["examples"][0]
            if name in declared:  # moved to the components by openapi_document
                parameter[_DECLARED] = declared[name]
            found.append(parameter)
    return [*found, *endpoint.headers]


def responses(endpoint: Endpoint) -> Schema:
    """The response objects of ``endpoint`` by status: its answers, its job's ``202``, and its
    errors."""
    answer = endpoint.answer
    responses: dict[str, Any]
    if isinstance(answer, type) and issubclass(answer, BaseModel):
        first = (answer.__doc__ or answer.__name__).strip().splitlines()[0]
        responses = {"200": json_body(answer, first)}
    else:
        responses = dict(answer or {})
    if endpoint.job is not None:
        responses["202"] = job_accepted()
    for status in sorted(_refusals(endpoint)):
        responses.setdefault(str(status), error_answer(status, endpoint.error_media))
    return responses


def operation(endpoint: Endpoint, settings: Settings) -> Schema:
    """The OpenAPI operation object of ``endpoint``."""
    op: Schema = {
        "operationId": endpoint.name,
        "summary": endpoint.summary.replace("``", "`").rstrip("."),
        "tags": [endpoint.tag],
        "parameters": parameters(endpoint, settings),
        "responses": responses(endpoint),
    }
    body = endpoint.body
    if isinstance(body, type):
        op["requestBody"] = request_body(
            body, endpoint.body_media, required=not endpoint.body_optional
        )
    elif body is not None:
        op["requestBody"] = body
    security = _security(endpoint.rule, endpoint.own_credentials)
    if security is not None:
        op["security"] = security
    return op


def openapi_document(endpoints: Iterable[Endpoint], settings: Settings, prefix: str) -> Schema:
    """The OpenAPI 3.1 document of ``endpoints`` as mounted under ``prefix``.

    Args:
        endpoints: the endpoints under the mount (those not ``documented`` are left out).
        settings: the settings whose limits the parameters state.
        prefix: the mount, ``/api-user`` or ``/api/v1``: the document's server.
    """
    paths: dict[str, Schema] = {}
    declared: dict[str, Schema] = {}
    for endpoint in endpoints:
        if endpoint.documented:
            item = paths.setdefault(openapi_path(endpoint.path), {})
            op = item[endpoint.method.lower()] = operation(endpoint, settings)
            for i, parameter in enumerate(op["parameters"]):
                if _DECLARED in parameter:
                    name = parameter.pop(_DECLARED)
                    declared[name] = parameter
                    op["parameters"][i] = {"$ref": f"#/components/parameters/{name}"}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "mapsvc",
            "version": VERSION,
            "description": "Map-data backend: raster tiles, PostGIS vector data, providers, jobs. "
            'Every failure answers `{"error": {"code", "message", "detail"}}`.',
        },
        "servers": [{"url": prefix}],
        "security": _CREDENTIALS,
        "paths": paths,
        "components": {
            "schemas": components(),
            "parameters": declared,
            "securitySchemes": _security_schemes(prefix),
        },
    }
