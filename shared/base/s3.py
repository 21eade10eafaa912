"""The S3 client of object storage (tiles, rasters, exports): its connection options, and
its errors read as the service says them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import boto3
from boto3.exceptions import S3UploadFailedError
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    NoCredentialsError,
    ReadTimeoutError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from shared.errors import UnavailableError
from shared.settings import S3Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "connection_options",
    "is_missing_key",
    "key_prefix",
    "missing_as_none",
    "s3_client",
    "storage_reason",
]

T = TypeVar("T")


_MISSING_KEY_CODES = {"NoSuchKey", "404", "NotFound"}


_ACCESS_CODES = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
}


def key_prefix(value: str) -> str:
    """The keys' prefix of a folder setting: ``tiles``, ``/tiles/`` and ``tiles/`` all mean
    keys under ``tiles/``; ``""`` means the bucket's root."""
    value = value.strip().strip("/")
    return f"{value}/" if value else ""


def connection_options(s3: S3Settings) -> dict[str, Any]:
    """The endpoint, region, keys and addressing style of ``MAPSVC_S3_*``, as :func:`s3_client`
    and :class:`S3TileStore` take them (the tile cache and the raster store share them)."""
    key_id, secret = s3.access_key_id, s3.secret_access_key
    return {
        "endpoint_url": s3.endpoint_url,
        "region": s3.region,
        "access_key_id": key_id.get_secret_value() if key_id is not None else None,
        "secret_access_key": secret.get_secret_value() if secret is not None else None,
        "addressing_style": s3.addressing_style,
    }


def s3_client(
    *,
    endpoint_url: str | None,
    region: str,
    access_key_id: str | None,
    secret_access_key: str | None,
    addressing_style: Literal["path", "virtual", "auto"],
    connect_timeout_s: float = 3.0,
    read_timeout_s: float = 10.0,
    max_attempts: int = 3,
    max_pool_connections: int = 32,
) -> S3Client:
    """A boto3 S3 client with explicit timeouts and bounded retries (see `S3TileStore`).

    Every object storage client of the service is made here (the tile cache, the raster store).
    """
    config = Config(
        region_name=region,
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
        retries={"max_attempts": max_attempts, "mode": "standard"},
        max_pool_connections=max_pool_connections,
        s3={"addressing_style": addressing_style},
        # checksums only where S3 requires them: other S3-compatible servers refuse
        # the CRC headers that newer boto3 versions add to every upload
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    # a session of its own: boto3's default session is not safe to share between threads
    client: S3Client = boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        config=config,
    )
    return client


def is_missing_key(exc: ClientError) -> bool:
    """Whether ``exc`` says the key is not stored (and not that the bucket is missing)."""
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = error.get("Code", "")
    return code in _MISSING_KEY_CODES or (status == 404 and code != "NoSuchBucket")


def missing_as_none(
    call: Callable[[], T], unavailable: Callable[[Exception], UnavailableError]
) -> T | None:
    """``call()``, or None when the key it asks for is not stored.

    Raises:
        UnavailableError: ``unavailable(exc)`` for any other failure of the storage.
    """
    try:
        return call()
    except ClientError as exc:
        if is_missing_key(exc):
            return None
        raise unavailable(exc) from exc
    except (BotoCoreError, S3UploadFailedError) as exc:
        raise unavailable(exc) from exc


def storage_reason(exc: Exception, bucket: str) -> str:
    """Why a call to object storage failed, fit for a user (the endpoint's address left out)."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code", "?")
        if code == "NoSuchBucket":
            return f"the bucket {bucket!r} does not exist (create it first)"
        if code in _ACCESS_CODES:
            return f"access refused ({code}): check MAPSVC_S3_ACCESS_KEY_ID and the secret"
        return f"{code}: {error.get('Message', '')}".rstrip(": ")
    if isinstance(exc, ReadTimeoutError):
        return "the storage did not answer in time"
    if isinstance(exc, BotoConnectionError | ConnectionClosedError):
        return "cannot connect to the storage endpoint (MAPSVC_S3_ENDPOINT_URL)"
    if isinstance(exc, NoCredentialsError):
        return "no credentials (set MAPSVC_S3_ACCESS_KEY_ID and MAPSVC_S3_SECRET_ACCESS_KEY)"
    return type(exc).__name__
