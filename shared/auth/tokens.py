"""Access tokens: HS256 JWTs (PyJWT) signed with named keys, and where those keys come from.

The keys are ``MAPSVC_JWT_SECRETS`` (``kid:secret,…``: the first signs, all verify, so a key
can be rotated in), or when that is unset one key made on first use and kept in
``<work_dir>/auth/secrets.json`` with the Flower password. A token names its key in the
``kid`` header; only HS256 is accepted, whatever the token's header says.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt

from shared.auth.errors import InvalidTokenError
from shared.auth.principal import ROLES, Principal
from shared.auth.users import User
from shared.settings import Settings

__all__ = [
    "ALGORITHM",
    "MIN_SECRET_BYTES",
    "SigningKeys",
    "flower_basic_auth",
    "issue_access_token",
    "secrets_path",
    "signing_keys",
    "verify_access_token",
]

ALGORITHM = "HS256"
#: shortest secret accepted: as many bytes as HS256's output (RFC 7518 section 3.2)
MIN_SECRET_BYTES = 32
_BAD_CLAIMS = "access token with missing or malformed claims"
_CLAIMS = ("uid", "login", "role", "layers", "iat", "exp")


@dataclass(frozen=True)
class SigningKeys:
    """HS256 keys by id (``kid``): the first signs, every one verifies.

    Raises:
        ValueError: no key, an empty or repeated id, or a secret shorter than 32 bytes.
    """

    keys: tuple[tuple[str, str], ...] = field(repr=False)

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("no JWT signing key")
        seen: set[str] = set()
        for kid, secret in self.keys:
            if not kid or kid in seen:
                raise ValueError(f"JWT key ids must be unique and not empty: {kid!r}")
            if len(secret.encode()) < MIN_SECRET_BYTES:
                raise ValueError(
                    f"the JWT secret of key {kid!r} is shorter than {MIN_SECRET_BYTES} bytes"
                )
            seen.add(kid)

    @classmethod
    def parse(cls, entries: Iterable[str]) -> SigningKeys:
        """The keys of ``kid:secret`` entries (``MAPSVC_JWT_SECRETS``); call it to validate them.

        Raises:
            ValueError: an entry without ``:``, or as for the class.
        """
        keys = []
        for entry in entries:
            kid, colon, secret = entry.partition(":")
            if not colon:
                raise ValueError("a JWT secret is written `kid:secret`")
            keys.append((kid.strip(), secret))
        return cls(tuple(keys))

    def current_secret(self) -> str:
        """The secret of the key that signs."""
        return self.keys[0][1]

    @property
    def kid(self) -> str:
        """The id of the key that signs."""
        return self.keys[0][0]

    def secret(self, kid: str) -> str | None:
        """The secret of key ``kid``, if it is one of these."""
        return dict(self.keys).get(kid)

    def __repr__(self) -> str:
        return f"SigningKeys(kids={[kid for kid, _ in self.keys]!r})"


def secrets_path(settings: Settings) -> Path:
    """Where the made secrets are kept: ``<work_dir>/auth/secrets.json``."""
    return settings.work_dir / "auth" / "secrets.json"


def _made_secrets() -> dict[str, Any]:
    return {
        "jwt": [{"kid": f"k{secrets.token_hex(4)}", "secret": secrets.token_urlsafe(48)}],
        "flower_basic_auth": f"mapsvc:{secrets.token_urlsafe(24)}",
    }


def _secrets_file(settings: Settings) -> dict[str, Any]:
    """The secrets file's content, the file made first if it is missing.

    The content is written to a new temporary file (``O_EXCL``, mode 0600), then linked to
    its name, which fails if the name exists: processes that race all read the one that
    linked first, and no process ever reads a half-written file.
    """
    path = secrets_path(settings)
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(_made_secrets(), out)
                out.flush()
                os.fsync(out.fileno())
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: use its file
        finally:
            tmp.unlink(missing_ok=True)
    content = json.loads(path.read_text())
    if not isinstance(content, dict):
        raise ValueError(f"{path} is not a JSON object")
    return content


def signing_keys(settings: Settings) -> SigningKeys:
    """The JWT keys: ``settings.auth.jwt_secrets``, or else those of the secrets file.

    Raises:
        ValueError: a bad setting or a malformed secrets file.
    """
    if settings.auth.jwt_secrets:
        return SigningKeys.parse(settings.auth.jwt_secrets)
    entries = _secrets_file(settings).get("jwt")
    try:
        return SigningKeys(tuple((str(e["kid"]), str(e["secret"])) for e in entries or ()))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed `jwt` in {secrets_path(settings)}") from exc


def flower_basic_auth(settings: Settings) -> str:
    """Flower's ``user:password``: ``settings.auth.flower_basic_auth``, or the secrets file's."""
    if settings.auth.flower_basic_auth is not None:
        return settings.auth.flower_basic_auth.get_secret_value()
    value = _secrets_file(settings).get("flower_basic_auth")
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(f"malformed `flower_basic_auth` in {secrets_path(settings)}")
    return value


def issue_access_token(
    keys: SigningKeys, user: User, ttl_s: int, *, now: float | None = None
) -> str:
    """A signed access token of ``user``, valid for ``ttl_s`` seconds.

    Header ``{"alg": "HS256", "typ": "JWT", "kid": …}``; claims ``uid``, ``login``, ``role``,
    ``layers`` (a list, or null: every layer), ``iat``, ``exp``.

    Args:
        keys: the keys; the first signs.
        user: whose token it is.
        ttl_s: its lifetime (``settings.auth.jwt_ttl_s``).
        now: the time it is made (UNIX seconds); default: now.
    """
    issued = int(time.time() if now is None else now)
    claims = {
        "uid": user.id,
        "login": user.login,
        "role": user.role,
        "layers": None if user.layers is None else sorted(user.layers),
        "iat": issued,
        "exp": issued + ttl_s,
    }
    return jwt.encode(
        claims, keys.current_secret(), algorithm=ALGORITHM, headers={"kid": keys.kid, "typ": "JWT"}
    )


def verify_access_token(keys: SigningKeys, token: str) -> Principal:
    """The principal of a valid access token.

    Raises:
        InvalidTokenError: a malformed token, one whose header is not HS256 with a known
            ``kid``, a bad signature (a changed header or payload), an expired token, or
            missing or malformed claims.
    """
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise InvalidTokenError("malformed access token") from None
    kid = header.get("kid")
    if header.get("alg") != ALGORITHM or not isinstance(kid, str):
        raise InvalidTokenError(f"an access token is {ALGORITHM} with a key id")
    secret = keys.secret(kid)
    if secret is None:
        raise InvalidTokenError("access token signed with an unknown key")
    try:
        claims = jwt.decode(
            token, secret, algorithms=[ALGORITHM], options={"require": ["exp", "iat"]}
        )
    except jwt.ExpiredSignatureError:
        raise InvalidTokenError("the access token has expired") from None
    except jwt.MissingRequiredClaimError:
        raise InvalidTokenError(_BAD_CLAIMS) from None
    except jwt.PyJWTError:
        raise InvalidTokenError("invalid access token") from None
    return _principal(claims)


def _principal(claims: Mapping[str, Any]) -> Principal:
    uid, login, role, layers = (claims.get(name) for name in ("uid", "login", "role", "layers"))
    if (
        any(name not in claims for name in _CLAIMS)
        or not isinstance(uid, int)
        or isinstance(uid, bool)
        or not isinstance(login, str)
        or role not in ROLES
        or not (
            layers is None or isinstance(layers, list) and all(isinstance(x, str) for x in layers)
        )
    ):
        raise InvalidTokenError(_BAD_CLAIMS)
    return Principal(
        id=f"user:{uid}",
        name=login,
        role=ROLES[ROLES.index(role)],
        layers=None if layers is None else frozenset(layers),
        user_id=uid,
    )
