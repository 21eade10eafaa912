"""Password hashes (argon2id) and token digests (SHA-256)."""

from __future__ import annotations

from argon2 import PasswordHasher

from shared.auth import hashing
from tests.shared.auth.conftest import PRODUCTION_HASHER


def test_production_uses_the_library_defaults() -> None:
    default = PasswordHasher()
    for name in ("time_cost", "memory_cost", "parallelism", "hash_len", "salt_len", "type"):
        assert getattr(PRODUCTION_HASHER, name) == getattr(default, name)


def test_hash_and_verify() -> None:
    hashed = hashing.hash_password("correct horse")
    assert hashed.startswith("$argon2id$")
    assert "correct horse" not in hashed
    assert hashed != hashing.hash_password("correct horse")  # salted
    assert hashing.verify_password(hashed, "correct horse") is True
    assert hashing.verify_password(hashed, "correct horsE") is False
    assert hashing.verify_password(hashed, "") is False


def test_malformed_hashes_verify_false() -> None:
    for bad in ("", "not a hash", "$argon2id$v=19$m=8,t=1,p=1$", "$2b$12$abcdefghijklmnopqrstuv"):
        assert hashing.verify_password(bad, "whatever1") is False
    assert hashing.needs_rehash("not a hash") is True


def test_needs_rehash_follows_the_parameters() -> None:
    assert hashing.needs_rehash(hashing.hash_password("password1")) is False
    assert hashing.needs_rehash(PRODUCTION_HASHER.hash("password1")) is True


def test_dummy_verification_is_false() -> None:
    assert hashing.verify_dummy("anything at all") is False
    assert hashing._dummy is not None
    assert hashing._dummy[0] is hashing._hasher  # made with the current parameters


def test_digest_is_sha256_hex() -> None:
    assert hashing.digest("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    assert hashing.digest("abc") != hashing.digest("abd")
