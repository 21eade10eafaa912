"""What the tests of real GIS clients share: GDAL's programs, and a key to give them."""

from __future__ import annotations

import subprocess

import httpx

from tests.checks import AUTH


def run(*argv: str) -> str:
    """The standard output of a GDAL program, its caches off: every run asks the server."""
    env = {
        "GDAL_HTTP_TIMEOUT": "60",
        "CPL_VSIL_CURL_NON_CACHED": "/",
        "GDAL_ENABLE_WMS_CACHE": "NO",  # no gdalwmscache/ in the working directory
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


def reader_key(server: str, name: str, layers: list[str]) -> str:
    """A new reader's key of the server at ``server``, limited to ``layers``."""
    body = {"name": name, "role": "reader", "layers": layers}
    r = httpx.post(f"{server}/api-user/api-keys", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    found: str = r.json()["key"]
    return found
