"""Response objects of the OpenAPI document: the one error shape, JSON bodies, bytes, jobs."""

from __future__ import annotations

from pydantic import BaseModel

from api.openapi.models import ErrorResponse, Job, Schema, ref

__all__ = [
    "ERRORS",
    "any_of",
    "binary",
    "content",
    "error_answer",
    "job_accepted",
    "json_body",
    "request_body",
]

#: what each error status means, as the document says it
ERRORS = {
    400: "A malformed parameter, id or path (`invalid-input`, `detail.parameter` names it)",
    401: "No credentials, or credentials that are not valid (`unauthorized`)",
    403: "Refused on purpose, or a role too low (`forbidden`)",
    404: "No such resource (`not-found`)",
    409: "Clashes with the current state (`conflict`, `cancelled`)",
    413: "The body or a file is too large (`payload-too-large`)",
    416: "The `Range` asked is not in the file (`range-not-satisfiable`)",
    422: "Well-formed, but the data cannot be used (`unprocessable`)",
    429: "A rate limit is spent; `Retry-After` says when to come back (`rate-limited`)",
    502: "A provider failed (`upstream-error`)",
    503: "A dependency is down, not configured, or busy (`unavailable`, `not-configured`)",
    520: "A provider answered something unexpected (`upstream-bad-answer`)",
    521: "A provider is unreachable (`upstream-unreachable`)",
    522: "No connection to a provider in time (`upstream-connect-timeout`)",
    524: "A provider did not answer in time (`upstream-timeout`)",
}


def error_answer(status: int, media_type: str = "application/json") -> Schema:
    """The response of an error status: the one error shape, or (another ``media_type``) the
    text a service's own errors are (OGC exception reports)."""
    if media_type == "application/json":
        return json_body(ErrorResponse, ERRORS[status])
    return content(media_type, {"type": "string"}, ERRORS[status])


def content(media_type: str, schema: Schema, description: str) -> Schema:
    """A response whose body of ``media_type`` has ``schema``."""
    return {"description": description, "content": {media_type: {"schema": schema}}}


def json_body(model: type[BaseModel], description: str) -> Schema:
    """A response whose JSON body is ``model``."""
    return content("application/json", ref(model), description)


def binary(media_type: str, description: str) -> Schema:
    """A response whose body is bytes of ``media_type``."""
    return content(media_type, {"type": "string", "format": "binary"}, description)


def any_of(description: str, *models: type[BaseModel]) -> Schema:
    """A response whose JSON body is one of ``models``."""
    schema = {"anyOf": [ref(m) for m in models]}
    return content("application/json", schema, description)


def job_accepted() -> Schema:
    """The ``202`` of a route that starts a job: the job's descriptor, ``Location`` its URL."""
    response = json_body(Job, "The job runs on: its descriptor (`Location` names it)")
    response["headers"] = {
        "Location": {"schema": {"type": "string"}, "description": "The job's URL"},
        "X-Job-ID": {"schema": {"type": "string"}, "description": "The job id"},
    }
    return response


def request_body(model: type[BaseModel], *media: str, required: bool = True) -> Schema:
    """A request body of ``model`` (``required`` or not), in each of ``media`` (as it is read:
    validation)."""
    schema = {"schema": ref(model, "validation")}
    return {"required": required, "content": dict.fromkeys(media, schema)}
