"""The :class:`Operation` of a route and the response objects its table is built from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel

from api.openapi.models import ErrorResponse, Job, Schema, ref
from api.openapi.parameters import ASYNC

__all__ = [
    "Operation",
    "any_of",
    "binary",
    "content",
    "error_answer",
    "heavy",
    "json_body",
]

_ERRORS = {
    400: "A malformed parameter, id or path (`invalid-input`, `detail.parameter` names it)",
    401: "No credentials, or credentials that are not valid (`unauthorized`)",
    403: "Refused on purpose, or a role too low (`forbidden`)",
    404: "No such resource (`not-found`)",
    409: "Clashes with the current state (`conflict`, `cancelled`)",
    413: "The body or a file is too large (`payload-too-large`)",
    422: "Well-formed, but the data cannot be used (`unprocessable`)",
    429: "A rate limit is spent; `Retry-After` says when to come back (`rate-limited`)",
    502: "A provider failed (`upstream-error`)",
    503: "A dependency is down, not configured, or busy (`unavailable`, `not-configured`)",
    520: "A provider answered something unexpected (`upstream-bad-answer`)",
    521: "A provider is unreachable (`upstream-unreachable`)",
    522: "No connection to a provider in time (`upstream-connect-timeout`)",
    524: "A provider did not answer in time (`upstream-timeout`)",
}
_JOB_ERRORS = (404, 409, 422)


def error_answer(status: int) -> Schema:
    """The response of an error status: the one error shape."""
    return json_body(ErrorResponse, _ERRORS[status])


def content(media_type: str, schema: Schema, description: str) -> Schema:
    """A response whose body of ``media_type`` has ``schema``."""
    return {"description": description, "content": {media_type: {"schema": schema}}}


def json_body(model: type[BaseModel], description: str) -> Schema:
    """A response whose JSON body is ``model``."""
    return content("application/json", ref(model), description)


def binary(media_type: str, description: str) -> Schema:
    """A response whose body is bytes of ``media_type``."""
    return content(media_type, {"type": "string", "format": "binary"}, description)


def _job_accepted() -> Schema:
    response = json_body(Job, "The job runs on: its descriptor (`Location` names it)")
    response["headers"] = {
        "Location": {"schema": {"type": "string"}, "description": "The job's URL"},
        "X-Job-ID": {"schema": {"type": "string"}, "description": "The job id"},
    }
    return response


@dataclass(frozen=True)
class Operation:
    """How one route is called and what it answers; ``errors`` are statuses of the error shape.

    Every operation documents 400 (a bad parameter or ``Host``) and 503 (a dependency) too.
    """

    summary: str
    tag: str
    parameters: Sequence[Schema] = ()
    responses: Mapping[str, Schema] = field(default_factory=dict)
    errors: Sequence[int] = ()
    request_body: Schema | None = None

    def as_dict(self, operation_id: str) -> Schema:
        """The OpenAPI operation object."""
        responses = dict(self.responses)
        for status in sorted({400, 503, *self.errors}):
            responses.setdefault(str(status), error_answer(status))
        op: Schema = {
            "operationId": operation_id,
            "summary": self.summary,
            "tags": [self.tag],
            "parameters": list(self.parameters),
            "responses": responses,
        }
        if self.request_body is not None:
            op["requestBody"] = self.request_body
        return op


def heavy(summary: str, tag: str, params: Sequence[Schema], result: Schema) -> Operation:
    """An operation run as a job: its result, or 202 with the job (at once with ``async=1``)."""
    return Operation(
        summary,
        tag,
        [*params, ASYNC],
        {"200": result, "202": _job_accepted()},
        _JOB_ERRORS,
    )


def any_of(description: str, *models: type[BaseModel]) -> Schema:
    """A response whose JSON body is one of ``models``."""
    schema = {"anyOf": [ref(m) for m in models]}
    return content("application/json", schema, description)
