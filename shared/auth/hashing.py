"""Hashes of what is never stored in clear: passwords (argon2id), random tokens (SHA-256)."""

from __future__ import annotations

import hashlib
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

__all__ = ["digest", "hash_password", "needs_rehash", "verify_dummy", "verify_password"]

#: argon2id with the library's defaults (RFC 9106's second recommended profile)
_hasher = PasswordHasher()

#: a hash of an unknown password, made with `_hasher` on first use (see `verify_dummy`)
_dummy: tuple[PasswordHasher, str] | None = None


def hash_password(password: str) -> str:
    """The argon2id hash of ``password``, salted, in the PHC string format."""
    return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    """Whether ``password`` matches ``password_hash``; False for a malformed hash, never raises."""
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def needs_rehash(password_hash: str) -> bool:
    """Whether ``password_hash`` was made with other parameters than `hash_password` uses now."""
    try:
        return _hasher.check_needs_rehash(password_hash)
    except (InvalidHashError, ValueError):
        return True


def verify_dummy(password: str) -> bool:
    """Verify ``password`` against a hash of a random password: as slow as `verify_password`.

    Used for an unknown login, so that it takes as long as a known login with a wrong
    password and timing does not tell which logins exist. Always False.
    """
    global _dummy
    if _dummy is None or _dummy[0] is not _hasher:
        _dummy = (_hasher, _hasher.hash(secrets.token_urlsafe(16)))
    verify_password(_dummy[1], password)
    return False


def digest(token: str) -> str:
    """The SHA-256 of ``token``, in hex: how API keys, refresh tokens, codes and secrets are kept.

    Those tokens are made by the service with `secrets` and carry 256 bits of entropy, so no
    guessing or precomputation can find one from its digest: a slow, salted hash (needed for
    passwords, which people choose) would add nothing. A fast, unsalted hash is also the same
    for the same token, which lets a token be looked up by its digest (a unique index).
    """
    return hashlib.sha256(token.encode()).hexdigest()
