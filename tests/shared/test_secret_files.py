"""Every secret setting can be read from a file: ``MAPSVC_<NAME>_FILE`` (Docker secrets)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import SecretStr
from pydantic_settings import SettingsError

from shared.settings import KEYED_PROVIDERS, Settings, env_values, file_fields

SETTINGS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
#: fits every secret setting: an admin key's length, a JWT secret's and Flower's `a:b` shape
VALUE = "k1:" + "s3cr3t" * 7
#: the S3 keys go together: the other one of the two is given as a plain variable
PARTNER = {
    "MAPSVC_S3_ACCESS_KEY_ID": "MAPSVC_S3_SECRET_ACCESS_KEY",
    "MAPSVC_S3_SECRET_ACCESS_KEY": "MAPSVC_S3_ACCESS_KEY_ID",
}


def _secret_variables() -> list[str]:
    """The variables of every field `SecretFiles` reads, as ``env_values`` names them."""
    names = [Settings.variable(name) for name in file_fields(Settings)]
    for cls in Settings.concerns.values():
        names += [cls.variable(name) for name in file_fields(cls)]
    names += [f"MAPSVC_{name.upper()}_API_KEY" for name in sorted(KEYED_PROVIDERS)]
    return names


def _plain(value: object) -> object:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return ",".join(value) if isinstance(value, tuple) else value


def test_the_secret_variables_are_settings() -> None:
    known = env_values(Settings(_env_file=None))  # type: ignore[call-arg]
    assert set(_secret_variables()) <= set(known)
    assert "MAPSVC_DATABASE_URL" in _secret_variables()
    assert "MAPSVC_ADMIN_API_KEY" in _secret_variables()


@pytest.mark.parametrize("variable", _secret_variables())
def test_a_secret_is_read_from_the_file_its_variable_names(
    variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(VALUE + "\n")  # as `echo` writes it: the line break is not the secret's
    monkeypatch.setenv(f"{variable}_FILE", str(secret))
    if variable in PARTNER:
        monkeypatch.setenv(PARTNER[variable], "partner")
    values = env_values(Settings(_env_file=None))  # type: ignore[call-arg]
    assert _plain(values[variable]) == VALUE


def test_a_file_named_in_dotenv_is_read_too(tmp_path: Path) -> None:
    secret = tmp_path / "flower"
    secret.write_text("ops:pw\r\n")
    dotenv = tmp_path / ".env"
    dotenv.write_text(f"MAPSVC_FLOWER_BASIC_AUTH_FILE={secret}\n")
    settings = Settings(_env_file=dotenv)  # type: ignore[call-arg]
    assert _plain(settings.auth.flower_basic_auth) == "ops:pw"


def test_a_variable_and_its_file_both_set_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "key"
    secret.write_text(VALUE)
    monkeypatch.setenv("MAPSVC_ADMIN_API_KEY_FILE", str(secret))
    monkeypatch.setenv("MAPSVC_ADMIN_API_KEY", "x" * 40)
    with pytest.raises(SettingsError) as caught:
        Settings(_env_file=None)  # type: ignore[call-arg]
    message = str(caught.value)
    assert message == "set MAPSVC_ADMIN_API_KEY or MAPSVC_ADMIN_API_KEY_FILE, not both"
    assert VALUE not in message


def test_a_blank_variable_leaves_the_file_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "token"
    secret.write_text("tok")
    monkeypatch.setenv("MAPSVC_CONVERT_TOKEN_FILE", str(secret))
    monkeypatch.setenv("MAPSVC_CONVERT_TOKEN", "")  # compose's `${MAPSVC_CONVERT_TOKEN:-}`
    assert _plain(Settings(_env_file=None).convert.token) == "tok"  # type: ignore[call-arg]


def test_a_file_that_cannot_be_read_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "gone"
    monkeypatch.setenv("MAPSVC_DATABASE_URL_FILE", str(missing))
    with pytest.raises(SettingsError, match=f"^MAPSVC_DATABASE_URL_FILE: cannot read {missing}"):
        Settings(_env_file=None)  # type: ignore[call-arg]


def test_a_secret_from_a_file_is_checked_like_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "short"
    secret.write_text("too-short")
    monkeypatch.setenv("MAPSVC_ADMIN_API_KEY_FILE", str(secret))
    with pytest.raises(ValueError, match="needs at least 32") as caught:
        Settings(_env_file=None)  # type: ignore[call-arg]
    assert "too-short" not in str(caught.value)


def test_the_settings_page_lists_every_secret_file_variable() -> None:
    section = SETTINGS_PAGE.read_text().partition("## Secrets from files")[2]
    listed = re.findall(r"`(MAPSVC_[A-Z0-9_]+)_FILE`", section)
    assert sorted(listed) == sorted(_secret_variables())
