"""Access tokens: HS256 only, known key ids only, untampered and unexpired only."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import jwt
import pytest

from shared.auth.errors import InvalidTokenError
from shared.auth.principal import Principal
from shared.auth.tokens import (
    SigningKeys,
    flower_basic_auth,
    issue_access_token,
    secrets_path,
    signing_keys,
    verify_access_token,
)
from shared.auth.users import User
from shared.settings import Settings

SECRET = "0123456789abcdef0123456789abcdef-one"
OTHER = "0123456789abcdef0123456789abcdef-two"
KEYS = SigningKeys.parse([f"k1:{SECRET}", f"k0:{OTHER}"])
USER = User(
    id=7,
    login="alice",
    role="operator",
    layers=frozenset({"b", "a"}),
    disabled=False,
    created=datetime(2025, 1, 1, tzinfo=UTC),
)
ROOT = Path(__file__).resolve().parents[3]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _handmade(header: dict[str, object], claims: dict[str, object], secret: str) -> str:
    """A token signed with HMAC-SHA256 whatever its header says (an attacker's)."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    mac = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(mac)}"


def _claims(**changes: object) -> dict[str, object]:
    now = int(time.time())
    claims: dict[str, object] = {
        "uid": 7,
        "login": "alice",
        "role": "admin",
        "layers": None,
        "iat": now,
        "exp": now + 60,
    }
    claims.update(changes)
    return claims


def _refused(token: str, match: str | None = None) -> None:
    with pytest.raises(InvalidTokenError, match=match):
        verify_access_token(KEYS, token)


def test_round_trip() -> None:
    token = issue_access_token(KEYS, USER, 60)
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "HS256", "typ": "JWT", "kid": "k1"}
    claims = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert claims["uid"] == 7
    assert claims["login"] == "alice"
    assert claims["role"] == "operator"
    assert claims["layers"] == ["a", "b"]
    assert claims["exp"] - claims["iat"] == 60
    assert (
        verify_access_token(KEYS, token)
        == USER.principal()
        == Principal(
            id="user:7", name="alice", role="operator", layers=frozenset({"a", "b"}), user_id=7
        )
    )


def test_every_key_verifies_the_first_signs() -> None:
    old = SigningKeys.parse([f"k0:{OTHER}"])
    token = issue_access_token(old, USER, 60)
    assert verify_access_token(KEYS, token).user_id == 7  # k0 is still known
    assert jwt.get_unverified_header(issue_access_token(KEYS, USER, 60))["kid"] == "k1"


def test_all_layers_is_null() -> None:
    everyone = User(7, "alice", "admin", None, False, USER.created)
    token = issue_access_token(KEYS, everyone, 60)
    assert jwt.decode(token, SECRET, algorithms=["HS256"])["layers"] is None
    assert verify_access_token(KEYS, token).layers is None


def test_alg_none_is_refused() -> None:
    token = jwt.encode(_claims(), "", algorithm="none", headers={"kid": "k1"})
    assert jwt.get_unverified_header(token)["alg"] == "none"
    _refused(token, "HS256")
    _refused(token.rsplit(".", 1)[0] + ".", "HS256")


def test_rs256_header_with_hmac_signature_is_refused() -> None:
    # the key confusion attack: an HMAC over the token with a key the server knows, but a
    # header that says RS256
    _refused(_handmade({"alg": "RS256", "typ": "JWT", "kid": "k1"}, _claims(), SECRET), "HS256")


def test_hs512_is_refused() -> None:
    token = jwt.encode(_claims(), SECRET * 2, algorithm="HS512", headers={"kid": "k1"})
    _refused(token, "HS256")


def test_wrong_secret_is_refused() -> None:
    token = jwt.encode(_claims(), "x" * 40, algorithm="HS256", headers={"kid": "k1"})
    _refused(token, "invalid access token")
    # and a hand-made HS256 token with the right secret is fine: the checks are not too strict
    good = _handmade({"alg": "HS256", "typ": "JWT", "kid": "k1"}, _claims(), SECRET)
    assert verify_access_token(KEYS, good).role == "admin"


def test_expired_is_refused() -> None:
    token = issue_access_token(KEYS, USER, 60, now=time.time() - 61)
    _refused(token, "expired")


def test_tampered_payload_is_refused() -> None:
    header, _, signature = issue_access_token(KEYS, USER, 60).split(".")
    forged = _b64(json.dumps(_claims(role="admin", uid=7)).encode())
    _refused(f"{header}.{forged}.{signature}", "invalid access token")


def test_unknown_or_missing_kid_is_refused() -> None:
    _refused(jwt.encode(_claims(), SECRET, algorithm="HS256", headers={"kid": "k9"}), "unknown key")
    _refused(jwt.encode(_claims(), SECRET, algorithm="HS256"), "key id")
    _refused(_handmade({"alg": "HS256", "kid": 1}, _claims(), SECRET), "malformed|key id")


def test_missing_or_bad_claims_are_refused() -> None:
    for name in ("uid", "login", "role", "layers", "exp", "iat"):
        claims = _claims()
        del claims[name]
        token = jwt.encode(claims, SECRET, algorithm="HS256", headers={"kid": "k1"})
        _refused(token, "claim")
    for bad in ({"uid": "7"}, {"uid": True}, {"role": "root"}, {"layers": "a"}, {"login": 1}):
        token = jwt.encode(_claims(**bad), SECRET, algorithm="HS256", headers={"kid": "k1"})
        _refused(token, "claims")


def test_garbage_is_refused() -> None:
    for junk in ("", "abc", "a.b.c", "Bearer x"):
        _refused(junk)


def test_signing_keys_are_checked() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        SigningKeys.parse(["k1:short"])
    with pytest.raises(ValueError, match="kid:secret"):
        SigningKeys.parse([SECRET])
    with pytest.raises(ValueError, match="unique"):
        SigningKeys.parse([f"k1:{SECRET}", f"k1:{OTHER}"])
    with pytest.raises(ValueError, match="no JWT"):
        SigningKeys.parse([])
    assert SECRET not in repr(KEYS)
    assert "k1" in repr(KEYS)
    assert KEYS.current_secret() == SECRET
    assert KEYS.kid == "k1"


def _settings(work_dir: Path, **fields: object) -> Settings:
    return Settings(work_dir=work_dir, _env_file=None, **fields)


def test_keys_from_settings(tmp_path: Path) -> None:
    settings = _settings(tmp_path, jwt_secrets=f"k1:{SECRET},k0:{OTHER}", flower_basic_auth="u:p")
    assert signing_keys(settings) == KEYS
    assert flower_basic_auth(settings) == "u:p"
    assert not secrets_path(settings).exists()
    with pytest.raises(ValueError, match="32 bytes"):
        signing_keys(_settings(tmp_path, jwt_secrets="k1:short"))


def test_secrets_file_is_made_once(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    keys = signing_keys(settings)
    path = secrets_path(settings)
    assert path == tmp_path / "auth" / "secrets.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    content = json.loads(path.read_text())
    assert content["jwt"][0]["kid"] == keys.kid
    assert content["jwt"][0]["secret"] == keys.current_secret()
    assert len(keys.current_secret()) >= 32
    assert content["flower_basic_auth"].startswith("mapsvc:")
    assert flower_basic_auth(settings) == content["flower_basic_auth"]
    assert signing_keys(settings) == keys  # read, not made anew
    assert sorted(p.name for p in path.parent.iterdir()) == ["secrets.json"]  # no temp left


def test_racing_processes_get_one_secret(tmp_path: Path) -> None:
    script = (
        "import sys; from pathlib import Path; from shared.settings import Settings;"
        "from shared.auth.tokens import signing_keys;"
        "s = Settings(work_dir=Path(sys.argv[1]), _env_file=None);"
        "print(signing_keys(s).current_secret())"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSVC_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
            text=True,
        )
        for _ in range(4)
    ]
    secrets = {proc.communicate(timeout=60)[0].strip() for proc in procs}
    assert all(proc.returncode == 0 for proc in procs)
    assert len(secrets) == 1
    assert secrets == {signing_keys(_settings(tmp_path)).current_secret()}


def test_malformed_secrets_file(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = secrets_path(settings)
    path.parent.mkdir()
    path.write_text('{"jwt": [{"kid": "k1"}]}')
    with pytest.raises(ValueError, match="malformed"):
        signing_keys(settings)
    with pytest.raises(ValueError, match="malformed"):
        flower_basic_auth(settings)
