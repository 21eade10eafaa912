"""Errors of authentication and OAuth 2.0, below the tree of `shared.errors`.

UnauthorizedError (shared.errors)   "unauthorized"         401
├── InvalidTokenError                "invalid-token"        a bearer token (JWT) is not valid
└── InvalidClientError               "invalid-client"       OAuth ``invalid_client``
TooManyRequestsError (shared.errors) "rate-limited"         429
└── AccountLockedError               "account-locked"       too many failed logins
InvalidInputError (shared.errors)    "invalid-input"        400
├── InvalidRequestError              "invalid-request"      OAuth ``invalid_request``
├── InvalidGrantError                "invalid-grant"        OAuth ``invalid_grant``
├── UnauthorizedClientError          "unauthorized-client"  OAuth ``unauthorized_client``
└── UnsupportedGrantTypeError        "unsupported-grant-type" OAuth ``unsupported_grant_type``

Every OAuth error carries its RFC 6749 (section 5.2) code as the ``oauth_error`` detail, so
the token endpoint can answer ``{"error": <oauth_error>, "error_description": <message>}``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from shared.errors import InvalidInputError, MapsvcError, TooManyRequestsError, UnauthorizedError

__all__ = [
    "AccountLockedError",
    "InvalidClientError",
    "InvalidGrantError",
    "InvalidRequestError",
    "InvalidTokenError",
    "OAuthError",
    "UnauthorizedClientError",
    "UnsupportedGrantTypeError",
]


class InvalidTokenError(UnauthorizedError):
    """A bearer token is malformed, badly signed, expired or signed with an unknown key."""

    code = "invalid-token"


class AccountLockedError(TooManyRequestsError):
    """Too many failed logins: the account is locked; ``retry_after_s`` says for how long.

    Unknown logins are locked the same way, so this error does not tell that a login exists.
    """

    code = "account-locked"


class OAuthError(MapsvcError):
    """Base of the OAuth 2.0 errors: sets the ``oauth_error`` detail from `oauth_error`.

    Each subclass also derives from the `shared.errors` class that gives its HTTP status.
    """

    code = "oauth-error"
    oauth_error: ClassVar[str] = "invalid_request"

    def __init__(self, message: str, **detail: Any) -> None:
        detail.setdefault("oauth_error", self.oauth_error)
        super().__init__(message, **detail)


class InvalidRequestError(OAuthError, InvalidInputError):
    """The OAuth request lacks a parameter or has a wrong one (a missing PKCE challenge)."""

    code = "invalid-request"
    oauth_error = "invalid_request"


class InvalidClientError(OAuthError, UnauthorizedError):
    """The OAuth client is unknown, or its secret is missing or wrong."""

    code = "invalid-client"
    oauth_error = "invalid_client"


class InvalidGrantError(OAuthError, InvalidInputError):
    """The code or refresh token is unknown, used, expired, revoked or not the client's."""

    code = "invalid-grant"
    oauth_error = "invalid_grant"


class UnauthorizedClientError(OAuthError, InvalidInputError):
    """The client may not use this grant type."""

    code = "unauthorized-client"
    oauth_error = "unauthorized_client"


class UnsupportedGrantTypeError(OAuthError, InvalidInputError):
    """The grant type is not one the service supports."""

    code = "unsupported-grant-type"
    oauth_error = "unsupported_grant_type"
