"""Where the API's routes are mounted: the spec's prefix and its versioned twin (spec 4.0)."""

from __future__ import annotations

__all__ = ["USER_PREFIX", "V1_PREFIX"]

#: The prefix of the spec's routes.
USER_PREFIX = "/api-user"
#: The same routes under a versioned prefix.
V1_PREFIX = "/api/v1"
