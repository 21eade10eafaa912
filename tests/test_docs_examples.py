"""The docs are kept true by running them: every ``curl`` example of ``docs/`` and the README
runs against a live ``mapsvc up`` (a fresh database, the demo data, as ``make run`` leaves
them; the providers are the suite's fakes), and answers what its page says; the startup text
the pages quote is what ``mapsvc up`` prints; the error page names every error code the API
has.

The convention (docs/api/index.md, "Calling the API"): a fenced ``sh`` block that calls ``curl`` is
followed by an HTML comment stating, one line per call in the order the calls run, what each
answers::

    <!-- expect:
    200 json: folder,rows.name
    202 header: Location json: id,state=queued
    skip: starts a job of minutes
    -->

A line is a status followed by any of ``json:`` (comma-separated paths that must be in the
JSON body: ``a.b`` walks objects, a list on the way must be non-empty and each of its items
must have the rest, a list named last must be non-empty; ``path=value`` compares the value,
a string as it is, anything else as JSON: ``n=3``, ``rows=[]``), ``header:`` (names, or
``name=value``), ``type:`` (the start of ``Content-Type``) and ``text:`` (the rest of the line
must be in the body); or ``skip:`` and the reason the call is not made. A one-call block may
say it on one line: ``<!-- expect: 200 json: id -->``. Each block runs alone in bash
(``set -eu -o pipefail``), in a folder where ``work`` is the server's work dir, with
``MAPSVC_KEY`` the admin key ``mapsvc up`` made; ``curl`` is ``tests/docs_curl.py``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.errors import MapsvcError
from shared.settings import Settings
from tests.conftest import (
    ROOT,
    UP_REDIS_URL,
    drop_database,
    free_port,
    make_database,
    mapsvc_process,
    run_mapsvc,
    wait_for_output,
)
from tests.convert.pdfs import make_pdf
from tests.docs_curl import DOCS_SERVER

pytestmark = [pytest.mark.server, pytest.mark.worker]

#: the pages whose examples run
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")], key=lambda p: str(p.relative_to(ROOT))
)
_SHELLS = {"sh", "bash", "shell"}
_CURL = re.compile(r"(?:^|[\s;|&(`])curl\s")
_CLAUSE = re.compile(r"\s*\b(json|header|type|text):\s*")
#: the first and last lines of the startup text of ``mapsvc up``
_UP_FIRST, _UP_LAST = "mapsvc is up:", "Ctrl-C stops all."
#: the fragment of the startup text that names the nginx front, when there is one
_BEHIND_NGINX = "  behind nginx: cached tiles from disk"


@dataclass(frozen=True)
class Expect:
    """What one call answers (or why it is not made)."""

    status: int | None = None
    skip: str = ""
    json: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    type: str = ""
    text: str = ""


@dataclass
class Example:
    """A shell block of a page that calls curl, and what its calls answer."""

    page: Path
    line: int
    script: str
    expects: list[Expect] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def parse_expect(line: str) -> Expect:
    """One line of an expectation comment."""
    if line.startswith("skip:"):
        reason = line.removeprefix("skip:").strip()
        assert reason, "a skipped call says why"
        return Expect(skip=reason)
    status, *rest = _CLAUSE.split(line.strip())
    clauses = dict(zip(rest[::2], rest[1::2], strict=True))
    assert set(clauses) <= {"json", "header", "type", "text"}, line

    def names(key: str) -> tuple[str, ...]:
        return tuple(n.strip() for n in clauses.get(key, "").split(",") if n.strip())

    return Expect(
        status=int(status),
        json=names("json"),
        headers=names("header"),
        type=clauses.get("type", "").strip(),
        text=clauses.get("text", "").strip(),
    )


def _expectations(lines: list[str], at: int) -> list[Expect] | None:
    """The ``<!-- expect … -->`` comment starting at line ``at``, or None when there is none."""
    if at >= len(lines) or not lines[at].startswith("<!-- expect"):
        return None
    text = []
    for line in lines[at:]:
        text.append(line)
        if "-->" in line:
            break
    body = "\n".join(text).removeprefix("<!-- expect").split("-->", 1)[0].lstrip(":")
    return [parse_expect(line) for line in body.splitlines() if line.strip()]


def examples(page: Path) -> list[Example]:
    """The shell blocks of ``page`` that call curl, each with the comment after it (none:
    ``expects`` is empty, which the tests refuse)."""
    lines = page.read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        script = "\n".join(lines[i + 1 : end])
        if fence.group(1) in _SHELLS and _CURL.search(script):
            found.append(Example(page, i + 1, script, _expectations(lines, end + 1) or []))
        i = end + 1
    return found


EXAMPLES = [example for page in PAGES for example in examples(page)]


# -- the live service -------------------------------------------------------------------


@dataclass(frozen=True)
class Up:
    """A running ``mapsvc up`` and the folder a reader runs the examples in."""

    base: str
    startup: str  # the startup text, its ports and work dir as the docs write them
    reader: Path  # the reader's folder: ``work`` is the server's work dir
    key: str


def _startup_text(log: str, settings: Settings) -> str:
    """The startup text in ``log``, with the ports and work dir the docs show (the defaults)."""
    text = log[log.index(_UP_FIRST) :]
    text = text[: text.index(_UP_LAST) + len(_UP_LAST)]
    for ours, docs in (
        (settings.port, 8000),
        (settings.flower_port, 5555),
        (settings.convert.port, 4003),
    ):
        text = re.sub(rf"127\.0\.0\.1:{ours}\b", f"127.0.0.1:{docs}", text)
    return text.replace(f"{settings.work_dir}/", "work/")


@pytest.fixture(scope="module")
def up(psettings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    """``mapsvc demo-data`` and ``mapsvc up`` on a database of their own, as ``make run`` does
    on a first start (so ``up`` makes the first admin key and prints how to use it); the
    providers are the suite's fakes, parcels from the kadastr.live one."""
    tmp = tmp_path_factory.mktemp("docs")
    database = f"mapsvc_docs_{os.getpid()}"
    mine = psettings.model_copy(
        update={
            "work_dir": tmp / "work",
            "database_url": make_database(database, postgis=True),
            "redis_url": UP_REDIS_URL,  # a db of its own: /ready counts only its worker
            "port": free_port(),
            "backend_port": free_port(),
            "flower_port": free_port(),
            "convert_port": free_port(),
            "admin_api_key": None,
            "flower_basic_auth": None,
            "dzk_source": "kadastr",
        }
    )
    redis.Redis.from_url(mine.redis_url).flushdb()
    log = tmp / "up.log"
    try:
        run_mapsvc(mine, "demo-data", timeout=300, check=True)
        with mapsvc_process(
            mine, "up", log=log, stop_timeout=60, stop_signal=signal.SIGINT
        ) as proc:
            wait_for_output(proc, log, _UP_LAST, 180)
            reader = tmp / "reader"  # as the checkout: its deploy/ and the work dir
            reader.mkdir()
            (reader / "work").symlink_to(mine.work_dir)
            (reader / "deploy").symlink_to(ROOT / "deploy")
            (mine.work_dir / "docs").mkdir()
            for name, page in (("a.pdf", "a"), ("b.pdf", "b")):  # docs/convert.md's files
                pdf = make_pdf([(200, 200, page)])
                (reader / name).write_bytes(pdf)
                (mine.work_dir / "docs" / name).write_bytes(pdf)
            yield Up(
                base=f"http://127.0.0.1:{mine.port}",
                startup=_startup_text(log.read_text(), mine),
                reader=reader,
                key=(mine.work_dir / "auth" / "admin-key").read_text().strip(),
            )
    finally:
        drop_database(database)


# -- checks -----------------------------------------------------------------------------


def _leaves(value: Any, steps: list[str], where: str) -> list[Any]:
    """The values at ``steps`` below ``value``; a list on the way must be non-empty, and each
    of its items is walked."""
    if not steps:
        return [value]
    if isinstance(value, list):
        assert value, f"{where}: an empty list"
        return [leaf for item in value for leaf in _leaves(item, steps, where)]
    assert isinstance(value, dict), f"{where}: {value!r} is not an object"
    assert steps[0] in value, f"{where}: no {steps[0]!r} in {value!r}"
    return _leaves(value[steps[0]], steps[1:], f"{where}.{steps[0]}")


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def check(expect: Expect, answer: dict[str, Any]) -> None:
    """``answer`` (a record of tests/docs_curl.py) is what ``expect`` says."""
    assert answer["status"] == expect.status, answer.get("text")
    headers = answer["headers"]
    for header in expect.headers:
        name, eq, want = header.partition("=")
        assert name.lower() in headers, f"no {name} header"
        assert not eq or headers[name.lower()] == want, f"{name}: {headers[name.lower()]}"
    assert headers.get("content-type", "").startswith(expect.type), headers.get("content-type")
    if expect.text:
        assert expect.text in (answer["text"] or ""), answer["text"]
    if expect.json:
        body = json.loads(answer["text"])
        for path in expect.json:
            steps, eq, want = path.partition("=")
            for leaf in _leaves(body, steps.split("."), "$"):
                if eq:
                    assert _as_text(leaf) == want, f"{steps}: {leaf!r}, not {want}"
                else:
                    assert leaf != [], f"{steps}: an empty list"


def run_example(example: Example, up: Up, record: Path) -> list[dict[str, Any]]:
    """Run the block in bash, curl being tests/docs_curl.py; the record of every call."""
    skipped = [str(i) for i, e in enumerate(example.expects, start=1) if e.skip]
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(up.reader),
        "PYTHONPATH": str(ROOT),
        "DOCS_PYTHON": sys.executable,
        "DOCS_CURL_BASE": up.base,
        "DOCS_CURL_RECORD": str(record),
        "DOCS_CURL_SKIP": ",".join(skipped),
        "MAPSVC_KEY": up.key,
    }
    prelude = 'set -eu -o pipefail\ncurl() { "$DOCS_PYTHON" -m tests.docs_curl "$@"; }\n'
    done = subprocess.run(
        ["bash", "-c", prelude + example.script],
        env=env,
        cwd=up.reader,
        capture_output=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_the_example_answers_what_its_page_says(example: Example, up: Up, tmp_path: Path) -> None:
    assert example.expects, "no <!-- expect … --> after the block"
    if all(expect.skip for expect in example.expects):
        pytest.skip("; ".join(sorted({expect.skip for expect in example.expects})))
    answers = run_example(example, up, tmp_path / "calls.jsonl")
    assert len(answers) == len(example.expects), (
        f"{len(answers)} calls ran, the page states {len(example.expects)}"
    )
    for number, (expect, answer) in enumerate(zip(example.expects, answers, strict=True), 1):
        if expect.skip:
            continue
        try:
            check(expect, answer)
        except AssertionError as exc:
            raise AssertionError(f"call {number}, curl {' '.join(answer['argv'])}: {exc}") from None


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_startup_text_is_what_mapsvc_up_prints(page: str, up: Up) -> None:
    text = (ROOT / page).read_text()
    quoted = text[text.index(_UP_FIRST) :]
    quoted = quoted[: quoted.index(_UP_LAST) + len(_UP_LAST)]
    if shutil.which("nginx") is None:  # make run installs nginx; this machine has none
        quoted = quoted.replace(_BEHIND_NGINX, "")
    assert quoted == up.startup


# -- without the service ----------------------------------------------------------------


def test_the_examples_say_what_they_answer_and_carry_a_credential() -> None:
    assert EXAMPLES, "no examples found"
    for example in EXAMPLES:
        assert example.expects, f"{example.name}: no <!-- expect … --> after the block"
        assert DOCS_SERVER in example.script, example.name
        assert "$MAPSVC_KEY" in example.script or "work/auth/admin-key" in example.script, (
            f"{example.name}: the calls carry no credential"
        )


def test_an_expectation_line_reads_as_the_convention_says() -> None:
    line = "202 header: Location,X-Cache=MISS json: id,state=queued type: application/json"
    assert parse_expect(line) == Expect(
        status=202,
        headers=("Location", "X-Cache=MISS"),
        json=("id", "state=queued"),
        type="application/json",
    )
    assert parse_expect("200 text: data: Finish:success") == Expect(
        status=200, text="data: Finish:success"
    )
    assert parse_expect("skip: a job of minutes") == Expect(skip="a job of minutes")
    answer = {
        "status": 200,
        "headers": {"content-type": "application/json"},
        "text": json.dumps({"rows": [{"name": "a", "type": "dir"}], "empty": []}),
    }
    check(parse_expect("200 json: rows.name,rows.type=dir,empty=[]"), answer)
    for wrong in ("404", "200 json: rows.path", "200 json: empty", "200 json: rows.type=file"):
        with pytest.raises(AssertionError):
            check(parse_expect(wrong), answer)


def _codes_of(cls: type[MapsvcError]) -> set[str]:
    return {cls.code} | {code for sub in cls.__subclasses__() for code in _codes_of(sub)}


def _literal_codes() -> set[str]:
    """The codes the API writes without an error class: string literals handed as a code to
    ``error_response`` (or the front's ``_error``), and the router's (``api.errors``)."""
    from api.errors import _HTTP_CODES

    codes = set(_HTTP_CODES.values())
    for module in (ROOT / "api").rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if not isinstance(node, ast.Call):
                continue
            called = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if called in ("error_response", "_error"):
                codes |= {
                    arg.value
                    for arg in node.args
                    if isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and re.fullmatch(r"[a-z]+(?:-[a-z]+)*", arg.value)
                }
    return codes


def test_the_error_page_names_every_code_the_api_returns() -> None:
    import api.app  # noqa: F401 - every module of the API, so every error class, is loaded

    # OAuthError is the base of the OAuth errors, never raised itself
    codes = (_codes_of(MapsvcError) | _literal_codes()) - {"oauth-error"}
    assert {"invalid-host", "not-ready", "method-not-allowed", "account-locked"} <= codes
    page = (ROOT / "docs" / "api" / "errors.md").read_text()
    listed = set(re.findall(r"^\| `([a-z-]+)` \|", page, re.MULTILINE))
    assert sorted(codes - listed) == [], "codes missing from docs/api/errors.md"
    assert sorted(listed - codes) == [], "codes on docs/api/errors.md the API does not have"
