"""The README documents every setting the code reads."""

from __future__ import annotations

from shared.settings import Settings
from tests.conftest import ROOT


def test_every_setting_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in Settings.model_fields:
        assert f"| `MAPSVC_{name.upper()}` |" in readme, name
