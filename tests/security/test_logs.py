"""Secrets in logs and process lists (issue 21, class 3): no credential sent in a query reaches
any log the API writes, and Flower's password is not on its command line.

The API runs as ``mapsvc serve`` does (uvicorn's access log on, our log configuration), its
standard error captured; every file it writes in its work dir is read too.
"""

from __future__ import annotations

import io
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from api import cli
from shared.logs import SECRET_PARAMETERS, LogFormat, configure_logging, redact
from shared.settings import Settings
from tests.checks import AUTH
from tests.conftest import free_port, logged_process, serve_process, settings_env
from tests.services import poll, tail


def marker() -> str:
    return f"SECRET{uuid.uuid4().hex}"


def test_the_redaction_masks_every_credential_parameter() -> None:
    for name in SECRET_PARAMETERS:
        secret = marker()
        for spelling in (name, name.upper(), name.replace("_", "%5F")):
            line = f'"GET /api-user/x?a=1&{spelling}={secret}&b=2 HTTP/1.1" 200'
            assert redact(line) == f'"GET /api-user/x?a=1&{spelling}=***&b=2 HTTP/1.1" 200'
    secret = marker()
    # a value runs to the next & or blank, whatever it holds (# ; quotes)
    assert secret not in redact(f"/x?api_key=ab#{secret}")
    assert secret not in redact(f"/x?password=it's;{secret}&n=1")
    # other parameters, and names that only end like a secret one, are left alone
    assert redact("/x?key_code=1&barcode=2&tokens=3") == "/x?key_code=1&barcode=2&tokens=3"
    # the password of a URL
    assert redact(f"redis://:{secret}@redis:6379/0") == "redis://:***@redis:6379/0"
    assert redact(f"redis://user:{secret}@h/1 up") == "redis://user:***@h/1 up"


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_every_line_is_redacted_tracebacks_included(restored: None, log_format: LogFormat) -> None:
    out, secret, other = io.StringIO(), marker(), marker()
    configure_logging("INFO", log_format, out)
    access = logging.getLogger("uvicorn.access")
    level = access.level
    access.setLevel(logging.INFO)
    try:
        # uvicorn's access line, as uvicorn logs it
        access.info(
            '%s - "%s %s HTTP/%s" %d', "1.2.3.4:5", "GET", f"/t?api_key={secret}", "1.1", 200
        )
    finally:
        access.setLevel(level)
    try:
        raise ValueError(f"fetching https://p.example/x?appid={other} failed")
    except ValueError:
        logging.getLogger("mapsvc.test").exception("call of /y?token=%s", secret)
    text = out.getvalue()
    assert secret not in text
    assert other not in text
    assert "/t?api_key=***" in text
    assert "appid=***" in text


@pytest.fixture
def api_process(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """``mapsvc serve`` with the suite's settings and a work dir of its own: its base URL,
    its captured standard error and standard output, and its work dir."""
    work = tmp_path / "work"
    mine = settings.model_copy(update={"work_dir": work, "port": free_port()})
    log = tmp_path / "serve.log"
    with serve_process(mine, log) as base:
        yield base, log, work


def test_no_credential_in_a_query_reaches_a_log(api_process: tuple[str, Path, Path]) -> None:
    base, log, work = api_process
    secrets = {name: marker() for name in SECRET_PARAMETERS}
    with httpx.Client(base_url=base, timeout=30) as client:
        for name, secret in secrets.items():  # answered 200, 401, 404 …
            for path in ("/api-user/health", "/api-user/gis-raster", "/api/v1/no-such-route"):
                client.get(path, params={"a": "1", name: secret})
            client.get("/api-user/jobs", params={name: secret}, headers=AUTH)
        spelled = marker()
        client.get(f"/api-user/gis-raster?api%5Fkey={spelled}&API_KEY={spelled}")
        client.get(f"/oauth/authorize?response_type=code&code={spelled}&client_id=x")
        client.post(f"/oauth/token?client_secret={spelled}", data={"grant_type": "password"})
        client.post(f"/api/auth?password={spelled}", json={"login": "x", "password": "y"})
    time.sleep(0.5)  # the last access lines written
    written = log.read_text(errors="replace")
    assert "api_key=***" in written  # the access lines are there, redacted
    assert "/oauth/token?client_secret=***" in written
    texts = {"standard error": written} | {
        str(path): path.read_text(errors="replace") for path in work.rglob("*") if path.is_file()
    }
    for where, text in texts.items():
        for secret in [*secrets.values(), spelled]:
            assert secret not in text, (where, secret)


def test_flowers_password_is_not_on_its_command_line(settings: Settings, tmp_path: Path) -> None:
    login = ("flower", f"pw-{uuid.uuid4().hex}")
    mine = settings.model_copy(
        update={
            "flower_basic_auth": SecretStr(":".join(login)),
            "flower_port": free_port(),
            "work_dir": tmp_path / "work",
        }
    )
    argv, env = cli._flower_argv(mine), cli._flower_env(mine)
    assert not any(login[1] in arg for arg in argv)
    assert env["FLOWER_BASIC_AUTH"] == ":".join(login)
    # Flower started so takes the password from its environment
    log = tmp_path / "flower.log"
    url = f"http://127.0.0.1:{mine.flower_port}/"
    flower_env = settings_env(mine) | {"FLOWER_BASIC_AUTH": env["FLOWER_BASIC_AUTH"]}
    with logged_process(argv, flower_env, log, stop_timeout=20) as proc:

        def answers() -> bool:
            assert proc.poll() is None, tail(log)
            try:
                return httpx.get(url, timeout=2).status_code == 401
            except httpx.HTTPError:
                return False

        poll(answers, 60, "Flower answering", step=0.2)
        assert httpx.get(url, auth=login, timeout=10).status_code == 200
        assert httpx.get(url, auth=(login[0], "wrong"), timeout=10).status_code == 401
        command_line = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace")
        assert "flower" in command_line
        assert login[1] not in command_line
    assert login[1] not in log.read_text(errors="replace")
