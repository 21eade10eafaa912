"""The README documents every setting the code reads, and only those."""

from __future__ import annotations

import re

from shared.settings import Settings, env_values
from tests.conftest import ROOT


def test_every_setting_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    names = env_values(Settings(_env_file=None))  # type: ignore[call-arg]
    for name in names:
        assert f"| `{name}` |" in readme, name
    for name in re.findall(r"^\| `(MAPSVC_[A-Z0-9_]+)` \|", readme, re.MULTILINE):
        assert name in names, name
