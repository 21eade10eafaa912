"""Domain errors: one base class and a shallow tree; the API maps each class to a status.

MapsvcError                 code "internal"
├── InvalidInputError       "invalid-input"      the user's request cannot be understood
├── NotFoundError           "not-found"          what the request names does not exist
├── ConflictError           "conflict"           the request clashes with current state
├── UnprocessableError      "unprocessable"      well-formed, but the data cannot be used
├── UnavailableError        "unavailable"        a service we depend on is down
└── JobCancelledError       "cancelled"          a job was cancelled while it ran
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "ConflictError",
    "InvalidInputError",
    "JobCancelledError",
    "MapsvcError",
    "NotFoundError",
    "UnavailableError",
    "UnprocessableError",
    "error_from_code",
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
    """A service the request needs (Redis, PostgreSQL, a worker) cannot be reached."""

    code = "unavailable"


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
