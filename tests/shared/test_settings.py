"""Settings that are written into another program's configuration refuse what could break it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.settings import Settings


@pytest.mark.parametrize("backend", ["api:8000", "127.0.0.1:8001", "[::1]:8001"])
def test_the_fronts_backend_is_a_host_and_a_port(backend: str) -> None:
    assert Settings(front_backend=backend, _env_file=None).front_backend == backend  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "backend",
    ["api", "api:", ":8000", "api:0", "api:70000", "api:8000; evil", "a b:80", "api:80\nuser x"],
)
def test_a_backend_that_could_break_nginx_s_configuration_is_refused(backend: str) -> None:
    with pytest.raises(ValidationError, match="expected <ip>:<port>"):
        Settings(front_backend=backend, _env_file=None)  # type: ignore[call-arg]
