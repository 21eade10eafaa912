"""A short ``MAPSVC_ADMIN_API_KEY`` (issue 21, class 4): refused when the settings are read, so
no process starts with it, and the error names the setting but never the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.settings import ADMIN_KEY_MIN, Settings
from tests.conftest import ROOT

SHORT = "short-admin-key-not-32-chars"


def test_a_short_admin_key_is_refused_with_a_clear_message() -> None:
    for short in (SHORT, "x" * (ADMIN_KEY_MIN - 1)):
        with pytest.raises(ValidationError) as caught:
            Settings(admin_api_key=short, _env_file=None)  # type: ignore[call-arg]
        message = str(caught.value)
        assert "MAPSVC_ADMIN_API_KEY" in message
        assert f"at least {ADMIN_KEY_MIN}" in message
        assert short not in message  # a secret, even refused, is not printed
    key = "k" * ADMIN_KEY_MIN
    admin_key = Settings(admin_api_key=key, _env_file=None).auth.admin_api_key  # type: ignore[call-arg]
    assert admin_key is not None
    assert admin_key.get_secret_value() == key
    assert Settings(admin_api_key=" ", _env_file=None).auth.admin_api_key is None  # type: ignore[call-arg]


def test_no_process_starts_with_a_short_admin_key(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSVC_")}
    env |= {
        "MAPSVC_ADMIN_API_KEY": SHORT,
        "MAPSVC_WORK_DIR": str(tmp_path),
        "PYTHONPATH": str(ROOT),
    }
    started = subprocess.run(
        [sys.executable, "-m", "api.cli", "serve"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode != 0
    assert "MAPSVC_ADMIN_API_KEY" in started.stderr
    assert f"at least {ADMIN_KEY_MIN}" in started.stderr
    assert SHORT not in started.stdout + started.stderr
