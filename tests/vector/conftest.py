"""An app on the vector test tables (made by the `vector_tables` fixture of tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.conftest import admin_client


@pytest.fixture(scope="module")
def vc(settings: Settings, vector_tables: str) -> Iterator[TestClient]:
    """The API on the vector tables (catalogue read fresh for the module)."""
    with admin_client(create_app(settings), raise_server_exceptions=False) as client:
        yield client
