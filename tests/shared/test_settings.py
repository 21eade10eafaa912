"""Settings written into another program's configuration refuse what could break it; a field
that drops its concern's word keeps its variable and flat name; docs/settings.md holds the tables
the classes make."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared import settings_doc
from shared.settings import Settings, env_values


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


#: Fields whose name drops the concern its variable repeats: concern, field, variable, a value
#: as the variable gives it, and as the field holds it.
RENAMED = [
    ("vector", "schemas", "MAPSVC_VECTOR_SCHEMAS", "a, b", ("a", "b")),
    ("vector", "statement_timeout_ms", "MAPSVC_VECTOR_STATEMENT_TIMEOUT_MS", "700", 700),
    ("jobs", "wait_s", "MAPSVC_JOB_WAIT_S", "2.5", 2.5),
    ("tiles", "max_size", "MAPSVC_TILE_MAX_SIZE", "512", 512),
    ("auth", "code_ttl_s", "MAPSVC_AUTH_CODE_TTL_S", "30", 30),
    ("auth", "statement_timeout_ms", "MAPSVC_AUTH_STATEMENT_TIMEOUT_MS", "700", 700),
]


def test_no_field_repeats_its_concern() -> None:
    for attr, cls in Settings.concerns.items():
        words = {attr, attr.removesuffix("s")}
        stutter = [name for name in cls.model_fields if name.split("_")[0] in words]
        assert not stutter, (attr, stutter)


@pytest.mark.parametrize(("attr", "name", "variable", "text", "value"), RENAMED)
def test_a_renamed_field_keeps_its_variable(
    attr: str, name: str, variable: str, text: str, value: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, text)
    # the variable the field's name alone would make is nobody's
    monkeypatch.setenv(f"MAPSVC_{name.upper()}", "not read")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert getattr(getattr(settings, attr), name) == value
    assert env_values(settings)[variable] == value
    assert f"MAPSVC_{name.upper()}" not in env_values(settings)
    assert Settings.concerns[attr].variable(name) == variable


@pytest.mark.parametrize(("attr", "name", "variable", "text", "value"), RENAMED)
def test_a_renamed_field_is_given_by_its_flat_name(
    attr: str, name: str, variable: str, text: str, value: object
) -> None:
    flat = variable.removeprefix("MAPSVC_").lower()
    made = Settings(**{flat: text}, _env_file=None)  # type: ignore[arg-type]
    copied = Settings(_env_file=None).model_copy(update={flat: text})  # type: ignore[call-arg]
    for settings in (made, copied):
        assert getattr(getattr(settings, attr), name) == value


def test_a_copy_keeps_the_renamed_fields_and_checks_them() -> None:
    settings = Settings(job_wait_s=3, tile_max_size=512, _env_file=None)  # type: ignore[call-arg]
    copied = settings.model_copy(update={"job_stall_s": 5})
    assert (copied.jobs.wait_s, copied.jobs.stall_s, copied.tiles.max_size) == (3, 5, 512)
    with pytest.raises(ValidationError, match="job_wait_s"):
        settings.model_copy(update={"job_wait_s": -1})


def test_the_settings_page_holds_the_tables_the_classes_make() -> None:
    text = settings_doc.PAGE.read_text()
    assert text == settings_doc.page(text), "run: python -m shared.settings_doc"
