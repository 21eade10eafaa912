"""A local S3-compatible server (moto in server mode) for the object storage tests, and a plain
boto3 client to look at its buckets without the service."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError
from moto.server import ThreadedMotoServer
from pydantic import SecretStr

from tests.conftest import free_port

__all__ = ["KEYS", "keys", "moto_process", "moto_thread", "raw"]

#: the credentials the local server takes (any), as settings' fields
KEYS = {"s3_access_key_id": SecretStr("testing"), "s3_secret_access_key": SecretStr("testing")}


def raw(url: str) -> Any:
    """A plain boto3 client of the server at ``url`` (moto takes any keys)."""
    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def keys(url: str, bucket: str, prefix: str = "") -> set[str]:
    """Every key of ``bucket`` under ``prefix``."""
    pages = raw(url).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {item["Key"] for page in pages for item in page.get("Contents", [])}


@contextmanager
def moto_thread(*buckets: str) -> Iterator[str]:
    """moto in a thread of the tests' process, with ``buckets``; yields its URL.

    For tests whose only client is boto3: GDAL reads of ``/vsis3/`` need :func:`moto_process`.
    """
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    try:
        for bucket in buckets:
            raw(url).create_bucket(Bucket=bucket)
        yield url
    finally:
        server.stop()


@contextmanager
def moto_process(log: Path) -> Iterator[str]:
    """moto in server mode in a process of its own, on a loopback port; yields its URL.

    Not in a thread of the tests' process: rasterio holds the GIL through some GDAL calls that
    read ``/vsis3/``, so a server that needs the GIL to answer them would wait for them for ever.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                raw(url).list_buckets()
                break
            except BotoCoreError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto did not start:\n{log.read_text()[-3000:]}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
