"""The documentation: the settings page documents every setting the code reads, and only those;
the README stays a front page whose links lead to pages that exist; the nav names every page."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from shared.settings import Settings, env_values
from tests.conftest import ROOT

DOCS = ROOT / "docs"
#: the page that holds the table of every ``MAPSVC_*`` variable (the README's table until issue 15)
SETTINGS_PAGE = DOCS / "settings.md"
#: "about 150 lines at most" (issue 15): the reference lives in docs/
README_MAX_LINES = 150


def test_every_setting_is_in_the_settings_page() -> None:
    page = SETTINGS_PAGE.read_text()
    names = env_values(Settings(_env_file=None))  # type: ignore[call-arg]
    for name in names:
        assert f"| `{name}` |" in page, name
    for name in re.findall(r"^\| `(MAPSVC_[A-Z0-9_]+)` \|", page, re.MULTILINE):
        assert name in names, name


def test_the_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    # .ci/run runs the README's test command
    assert "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make run" in readme
    assert "make docs" in readme
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/images/") for link in local), "a screenshot"
    assert "docs/settings.md" in local
    for link in local:
        assert (ROOT / link).is_file(), link


def _nav_pages(nav: list[Any]) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_nav_names_every_page() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs"
    nav = _nav_pages(config["nav"])
    on_disk = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == on_disk
    assert len(nav) == len(set(nav))
    assert not Path(config["site_dir"]).is_relative_to("docs")
