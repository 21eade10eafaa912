"""Domain errors: one base class and a shallow tree; the API maps each class to a status.

MapsvcError                 code "internal"
├── InvalidInputError       "invalid-input"      the user's request cannot be understood
│   └── PayloadTooLargeError "payload-too-large"  a body or a file is larger than allowed
├── NotFoundError           "not-found"          what the request names does not exist
├── ConflictError           "conflict"           the request clashes with current state
├── UnprocessableError      "unprocessable"      well-formed, but the data cannot be used
├── ForbiddenError          "forbidden"          the request is refused (a proxy target, say)
├── UnavailableError        "unavailable"        a service we depend on is down
│   └── ProviderNotConfiguredError "not-configured"  no provider is set up for the request
├── UpstreamError           "upstream-error"     an external provider failed (5xx, too large)
│   ├── UpstreamBadAnswerError    "upstream-bad-answer"      malformed or unexpected answer
│   ├── UpstreamUnreachableError  "upstream-unreachable"     refused connection, DNS failure
│   ├── UpstreamConnectTimeoutError "upstream-connect-timeout" no connection in time
│   └── UpstreamTimeoutError      "upstream-timeout"         no answer in time
└── JobCancelledError       "cancelled"          a job was cancelled while it ran
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "ConflictError",
    "ForbiddenError",
    "InvalidInputError",
    "JobCancelledError",
    "MapsvcError",
    "NotFoundError",
    "PayloadTooLargeError",
    "ProviderNotConfiguredError",
    "UnavailableError",
    "UnprocessableError",
    "UpstreamBadAnswerError",
    "UpstreamConnectTimeoutError",
    "UpstreamError",
    "UpstreamTimeoutError",
    "UpstreamUnreachableError",
    "error_from_code",
    "TooManyRequestsError",
    "UnauthorizedError",
]


class MapsvcError(Exception):
    """Base of every error the service reports to a user."""

    code: ClassVar[str] = "internal"

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        # keep the detail when the error crosses a process boundary (render pool, workers)
        return (_rebuild, (type(self), self.message, self.detail))


def _rebuild(cls: type[MapsvcError], message: str, detail: dict[str, Any]) -> MapsvcError:
    return cls(message, **detail)


class InvalidInputError(MapsvcError):
    """The request is malformed: a bad parameter, id or path."""

    code = "invalid-input"


class PayloadTooLargeError(InvalidInputError):
    """The request's body, one of its files, or a file it names is larger than allowed."""

    code = "payload-too-large"


class NotFoundError(MapsvcError):
    """The resource the request names does not exist."""

    code = "not-found"


class ConflictError(MapsvcError):
    """The request clashes with the current state of the resource."""

    code = "conflict"


class UnprocessableError(MapsvcError):
    """The input is well-formed but its data cannot be used (a corrupt raster, say)."""

    code = "unprocessable"


class UnavailableError(MapsvcError):
    """A service the request needs (Redis, PostgreSQL, a worker) cannot be reached, or is busy.

    A ``retry_after_s`` detail becomes the response's ``Retry-After`` header.
    """

    code = "unavailable"


class ForbiddenError(MapsvcError):
    """The request is understood but refused (a proxy target that is not allowed, say)."""

    code = "forbidden"


class UnauthorizedError(MapsvcError):
    """No credentials where they are needed, or credentials that are not valid.

    An ``oauth_error`` detail (RFC 6749 section 5.2: ``invalid_client``, ``invalid_grant``, …)
    is the error code of an OAuth 2.0 token answer.
    """

    code = "unauthorized"


class TooManyRequestsError(MapsvcError):
    """A rate limit or a login throttle is spent; a ``retry_after_s`` detail says for how long."""

    code = "rate-limited"


class ProviderNotConfiguredError(UnavailableError):
    """No external provider is configured for what the request needs."""

    code = "not-configured"


class UpstreamError(MapsvcError):
    """An external provider failed: it answered 5xx, or more than the service accepts."""

    code = "upstream-error"


class UpstreamBadAnswerError(UpstreamError):
    """The provider's answer is malformed (not JSON, not its documented shape) or reset."""

    code = "upstream-bad-answer"


class UpstreamUnreachableError(UpstreamError):
    """The provider cannot be reached: its name does not resolve or it refuses connections."""

    code = "upstream-unreachable"


class UpstreamConnectTimeoutError(UpstreamError):
    """No connection to the provider could be made in time."""

    code = "upstream-connect-timeout"


class UpstreamTimeoutError(UpstreamError):
    """The provider accepted the connection but did not answer in time."""

    code = "upstream-timeout"


class JobCancelledError(MapsvcError):
    """The job was cancelled by a user while it ran."""

    code = "cancelled"


def error_from_code(code: str, message: str, detail: dict[str, Any] | None = None) -> MapsvcError:
    """Rebuild the error a worker reported by its code (unknown codes give the base class).

    Args:
        code: the ``code`` of an error class.
        message: the message fit for a user.
        detail: extra fields of the error.

    Returns:
        An instance of the matching class.
    """
    pending: list[type[MapsvcError]] = [MapsvcError]
    while pending:
        cls = pending.pop()
        if cls.code == code:
            return cls(message, **(detail or {}))
        pending.extend(cls.__subclasses__())
    return MapsvcError(message, **(detail or {}))
