"""Errors rebuilt from their codes keep their class, message and detail."""

from __future__ import annotations

import pytest

from shared import errors


@pytest.mark.parametrize(
    "cls",
    [
        errors.MapsvcError,
        errors.InvalidInputError,
        errors.NotFoundError,
        errors.ConflictError,
        errors.UnprocessableError,
        errors.UnavailableError,
        errors.JobCancelledError,
    ],
)
def test_error_from_code_round_trips(cls: type[errors.MapsvcError]) -> None:
    error = errors.error_from_code(cls.code, "msg", {"k": 1})
    assert type(error) is cls
    assert (error.message, error.detail) == ("msg", {"k": 1})


def test_unknown_code_gives_base_error() -> None:
    assert type(errors.error_from_code("nope", "m")) is errors.MapsvcError
