"""The ``curl`` of the docs' examples: the options the pages use, made with httpx and recorded.

``tests/test_docs_examples.py`` runs each example block in bash with ``curl`` a shell function
that runs ``python -m tests.docs_curl "$@"``: the shell expands the block as a reader's shell
would (``$B``, ``$MAPSVC_KEY``, ``$(cat …)``, quotes), and each call is made here, in order. Its
output is curl's (the body, ``-i`` headers, ``-o`` file, ``-w`` text), so that pipes and
``$(curl …)`` work, and its answer is appended to the record file as one JSON line. No curl
binary is needed (a fresh machine may have none).

Environment: ``DOCS_CURL_BASE`` replaces the docs' server ``http://127.0.0.1:8000``;
``DOCS_CURL_RECORD`` is the record file; ``DOCS_CURL_SKIP`` lists the calls (1-based, in the
order they run) not to make; ``DOCS_CURL_STREAM_S`` is how long an event stream is read.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

__all__ = ["DOCS_SERVER", "Call", "parse_args", "main"]

#: the server the examples name
DOCS_SERVER = "http://127.0.0.1:8000"
#: options that take a value, by every name they have
_VALUED = {
    "-H": "header",
    "--header": "header",
    "-d": "data",
    "--data": "data",
    "--data-binary": "data",
    "-F": "form",
    "--form": "form",
    "-o": "output",
    "--output": "output",
    "-X": "method",
    "--request": "method",
    "-w": "write_out",
    "--write-out": "write_out",
    "-u": "user",
    "--user": "user",
}
#: options without a value
_FLAGS = {
    "-s": "silent",
    "--silent": "silent",
    "-S": "show_error",
    "--show-error": "show_error",
    "-i": "include",
    "--include": "include",
    "-N": "no_buffer",
    "--no-buffer": "no_buffer",
}
_WRITE_OUT = re.compile(r"%\{http_code\}|%header\{([^}]+)\}|\\n")


class UsageError(Exception):
    """An option this curl does not know, or a call that leaves the docs' server."""


@dataclass
class Call:
    """One curl command line, read."""

    url: str = ""
    method: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    form: list[str] = field(default_factory=list)
    output: str | None = None
    write_out: str | None = None
    user: str | None = None
    include: bool = False
    flags: set[str] = field(default_factory=set)


def _take(call: Call, name: str, value: str) -> None:
    if name == "header":
        key, _, text = value.partition(":")
        call.headers.append((key.strip(), text.strip()))
    elif name in ("data", "form"):
        getattr(call, name).append(value)
    else:
        setattr(call, name, value)


def parse_args(argv: list[str]) -> Call:
    """A curl command line (``-sN``-style short flags combine) as a :class:`Call`.

    Raises:
        UsageError: an option this curl does not know, or not one URL.
    """
    call, urls, args = Call(), [], iter(argv)
    for arg in args:
        if arg in _VALUED:
            _take(call, _VALUED[arg], next(args, ""))
        elif arg.startswith("--") or arg in _FLAGS:
            if arg not in _FLAGS:
                raise UsageError(f"option {arg} is not one the docs' curl knows")
            call.flags.add(_FLAGS[arg])
        elif arg.startswith("-") and len(arg) > 1:
            for i, letter in enumerate(arg[1:], start=1):
                if f"-{letter}" in _VALUED:  # the rest of the word, or the next word
                    _take(call, _VALUED[f"-{letter}"], arg[i + 1 :] or next(args, ""))
                    break
                if f"-{letter}" not in _FLAGS:
                    raise UsageError(f"option -{letter} is not one the docs' curl knows")
                call.flags.add(_FLAGS[f"-{letter}"])
        else:
            urls.append(arg)
    if len(urls) != 1:
        raise UsageError(f"one URL expected, got {urls}")
    call.url = urls[0]
    call.include = "include" in call.flags
    return call


def _request(call: Call, base: str) -> dict[str, Any]:
    """The keyword arguments of httpx's request for ``call``."""
    if not call.url.startswith(DOCS_SERVER + "/"):
        raise UsageError(f"{call.url}: the examples call {DOCS_SERVER} only")
    headers = dict(call.headers)
    kwargs: dict[str, Any] = {"url": base + call.url[len(DOCS_SERVER) :], "headers": headers}
    if call.data:
        kwargs["content"] = "&".join(call.data).encode()
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/x-www-form-urlencoded"
    if call.form:
        files, fields = [], {}
        for part in call.form:
            name, _, value = part.partition("=")
            if value.startswith("@"):
                path = Path(value[1:])
                files.append((name, (path.name, path.read_bytes(), "application/octet-stream")))
            else:
                fields[name] = value
        kwargs["files"], kwargs["data"] = files, fields
    if call.user is not None:
        login, _, password = call.user.partition(":")
        kwargs["auth"] = (login, password)
    default = "POST" if call.data or call.form else "GET"
    kwargs["method"] = call.method or default
    return kwargs


def _read(response: httpx.Response, stream_s: float) -> bytes:
    """The body; an event stream is read for ``stream_s`` at most (curl -N would go on; its
    keep-alive comments end the wait for the next chunk)."""
    streaming = response.headers.get("content-type", "").startswith("text/event-stream")
    deadline = time.monotonic() + stream_s
    body = b""
    for chunk in response.iter_bytes():
        body += chunk
        if streaming and time.monotonic() > deadline:
            break
    return body


def _is_text(response: httpx.Response) -> bool:
    kind = response.headers.get("content-type", "")
    return kind.startswith("text/") or any(word in kind for word in ("json", "xml"))


def _write_out(template: str, response: httpx.Response) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "%{http_code}":
            return str(response.status_code)
        if match.group(0) == "\\n":
            return "\n"
        return str(response.headers.get(match.group(1), ""))

    return _WRITE_OUT.sub(one, template)


def _show(call: Call, response: httpx.Response, body: bytes) -> None:
    """Print or save the answer as curl does."""
    out = sys.stdout.buffer
    if call.include:
        status = f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n"
        lines = "".join(f"{k}: {v}\r\n" for k, v in response.headers.multi_items())
        out.write(f"{status}{lines}\r\n".encode())
    if call.output is not None:
        Path(call.output).write_bytes(body)
    else:
        out.write(body)
    if call.write_out is not None:
        out.write(_write_out(call.write_out, response).encode())
    out.flush()


def _record(path: Path, entry: dict[str, Any]) -> None:
    with path.open("a") as out:
        out.write(json.dumps(entry) + "\n")


def main(argv: list[str]) -> int:
    """Make (or skip) one call; curl's exit status (0, also for a 4xx answer)."""
    record = Path(os.environ["DOCS_CURL_RECORD"])
    number = len(record.read_text().splitlines()) + 1 if record.exists() else 1
    skipped = {int(n) for n in os.environ.get("DOCS_CURL_SKIP", "").split(",") if n}
    try:
        call = parse_args(argv)
        request = _request(call, os.environ["DOCS_CURL_BASE"])
    except (UsageError, OSError) as exc:
        print(f"curl: {exc}", file=sys.stderr)
        _record(record, {"argv": argv, "error": str(exc)})
        return 2
    if number in skipped:
        _record(record, {"argv": argv, "skipped": True})
        return 0
    stream_s = float(os.environ.get("DOCS_CURL_STREAM_S", "10"))
    try:
        with httpx.Client(timeout=180) as client, client.stream(**request) as response:
            body = _read(response, stream_s)
    except httpx.HTTPError as exc:
        print(f"curl: (7) {exc!r}", file=sys.stderr)
        _record(record, {"argv": argv, "error": repr(exc)})
        return 7
    _show(call, response, body)
    text = body.decode("utf-8", "replace") if _is_text(response) else None
    headers = {k.lower(): v for k, v in response.headers.items()}
    _record(
        record,
        {"argv": argv, "status": response.status_code, "headers": headers, "text": text},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
