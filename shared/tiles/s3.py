"""Tiles in S3-compatible object storage (``isS3=1``), under the same keys as on disk."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
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
from shared.tiles.store import StoredTile, etag_of, key_format
from shared.tiles.styles import check_style_id

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef

__all__ = [
    "S3TileStore",
    "connection_options",
    "is_missing_key",
    "key_prefix",
    "missing_as_none",
    "s3_client",
    "storage_reason",
]

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: DeleteObjects takes at most this many keys a call.
DELETE_BATCH = 1000
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


class S3TileStore:
    """Tiles as objects ``<prefix><style>/<lang>/<z>/<x>/<y>[@2x].<ext>`` in one bucket.

    The bucket is not created: a missing bucket is an ``UnavailableError`` naming it. One
    boto3 client serves every thread (boto3 clients are thread-safe); it has explicit timeouts
    and a bounded number of attempts, so a storage outage answers 503 within seconds.
    """

    def __init__(
        self,
        *,
        endpoint_url: str | None,
        bucket: str,
        prefix: str = "",
        region: str = "us-east-1",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        addressing_style: Literal["path", "virtual", "auto"] = "path",
        connect_timeout_s: float = 3.0,
        read_timeout_s: float = 10.0,
        max_attempts: int = 3,
        max_pool_connections: int = 32,
    ) -> None:
        """Make the client; nothing is sent until the first call.

        Args:
            endpoint_url: the S3-compatible endpoint (None: AWS's endpoint of ``region``).
            bucket: the bucket of the tiles; it must exist.
            prefix: a folder for the keys inside the bucket ("" for the bucket's root).
            region: the region requests are signed for.
            access_key_id: the access key; None with the secret: boto3's credential chain
                (``AWS_*`` variables, ``~/.aws``, an instance role).
            secret_access_key: the secret key.
            addressing_style: ``path`` (bucket in the path: MinIO, moto, Ceph) or
                ``virtual`` (bucket in the host name).
            connect_timeout_s: time to open a connection.
            read_timeout_s: time to wait for an answer.
            max_attempts: attempts of a call, the first one included ("standard" retries).
            max_pool_connections: connections kept open (one per concurrent thread).
        """
        self.bucket = bucket
        self.prefix = key_prefix(prefix)
        self._client = s3_client(
            endpoint_url=endpoint_url,
            region=region,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            addressing_style=addressing_style,
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
            max_attempts=max_attempts,
            max_pool_connections=max_pool_connections,
        )

    @property
    def client(self) -> S3Client:
        """The boto3 client (the exports in the bucket use it too)."""
        return self._client

    def _key(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def _missing_as_none(self, action: str, key: str, call: Callable[[], T]) -> T | None:
        """``call()``, or None when ``key`` is not stored; other storage errors: 503."""
        return missing_as_none(call, lambda exc: self._unavailable(action, key, exc))

    def get(self, key: str) -> bytes | None:
        """The tile stored under ``key``, or None.

        Raises:
            UnavailableError: the storage cannot be reached, refuses access, or has no bucket.
        """

        def read() -> bytes:
            response = self._client.get_object(Bucket=self.bucket, Key=self._key(key))
            body: bytes = response["Body"].read()
            return body

        return self._missing_as_none("reading a tile", key, read)

    def read(self, key: str) -> StoredTile | None:
        """The tile stored under ``key`` with the ETag of its bytes, or None.

        Raises:
            UnavailableError: as :meth:`get`.
        """
        data = self.get(key)
        return None if data is None else StoredTile(data, etag_of(data))

    def put(self, key: str, data: bytes, like: str | None = None) -> str:
        """Store a tile in one PutObject: readers see the whole object or none; its ETag.

        The object's ``Content-Type`` is its format's (from the key's extension). ``like`` is
        not used: objects have no links, each tile's bytes are sent.

        Raises:
            InvalidInputError: the key does not end with a tile format's extension.
            UnavailableError: the storage cannot be reached, refuses access, or has no bucket.
        """
        media_type = key_format(key).media_type
        try:
            self._client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data, ContentType=media_type
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable("storing a tile", key, exc) from exc
        return etag_of(data)

    def exists(self, key: str) -> bool:
        """Whether a tile is stored under ``key`` (a HEAD request).

        Raises:
            UnavailableError: the storage cannot be reached or refuses access.
        """
        head = functools.partial(self._client.head_object, Bucket=self.bucket, Key=self._key(key))
        return self._missing_as_none("checking a tile", key, head) is not None

    def modified(self, key: str) -> float | None:
        """When the object under ``key`` was written (its ``LastModified``), or None.

        Raises:
            UnavailableError: the storage cannot be reached or refuses access.
        """
        head = functools.partial(self._client.head_object, Bucket=self.bucket, Key=self._key(key))
        found = self._missing_as_none("checking a tile", key, head)
        return None if found is None else found["LastModified"].timestamp()

    def drop_style(self, style: str) -> None:
        """Delete every object under ``<prefix><style>/``, 1000 keys a request.

        Raises:
            InvalidInputError: ``style`` is not a style id (it could name more than one style).
            UnavailableError: the storage cannot be reached, refuses access, or has no bucket.
        """
        folder = f"{self.prefix}{check_style_id(style)}/"
        batch: list[ObjectIdentifierTypeDef] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=folder, PaginationConfig={"PageSize": DELETE_BATCH}
            )
            # the listing goes on from the last key listed, so deleting as we go is safe
            for page in pages:
                for item in page.get("Contents", []):
                    batch.append({"Key": item["Key"]})
                    if len(batch) == DELETE_BATCH:
                        self._delete(batch, style)
                        batch = []
            if batch:
                self._delete(batch, style)
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable(f"dropping the tiles of {style}", folder, exc) from exc

    def names(self, folder: str) -> list[str]:
        """The names in the folder of keys ``folder`` (``<style>/<lang>/<z>``, …): its objects'
        and its sub-folders' (a listing with ``/`` as delimiter); none when it is empty.

        Raises:
            UnavailableError: the storage cannot be reached, refuses access, or has no bucket.
        """
        start = f"{self._key(folder)}/"
        found: list[str] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=start, Delimiter="/"
            )
            for page in pages:
                found += [p["Prefix"][len(start) : -1] for p in page.get("CommonPrefixes", [])]
                found += [item["Key"][len(start) :] for item in page.get("Contents", [])]
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable("listing tiles", start, exc) from exc
        return found

    def key_pages(self, folder: str) -> Iterator[list[str]]:
        """The keys under the folder ``folder``, at any depth, a page (1000) at a time; a page
        may be removed before the next is asked (the listing goes on from its last key).

        Raises:
            UnavailableError: the storage cannot be reached, refuses access, or has no bucket.
        """
        start = f"{self._key(folder)}/"
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=start, PaginationConfig={"PageSize": DELETE_BATCH}
            )
            for page in pages:
                yield [item["Key"][len(self.prefix) :] for item in page.get("Contents", [])]
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable("listing tiles", start, exc) from exc

    def delete_many(self, keys: list[str]) -> int:
        """Delete the objects of ``keys``, 1000 a request; the number of keys (object storage
        does not say which were there: give keys a listing found).

        Raises:
            UnavailableError: the storage cannot be reached, refuses access, has no bucket, or
                did not delete some of them.
        """
        try:
            for i in range(0, len(keys), DELETE_BATCH):
                part = keys[i : i + DELETE_BATCH]
                self._delete([{"Key": self._key(key)} for key in part], part[0].split("/")[0])
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable("deleting tiles", keys[0], exc) from exc
        return len(keys)

    def _delete(self, batch: list[ObjectIdentifierTypeDef], style: str) -> None:
        response = self._client.delete_objects(
            Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
        )
        errors = response.get("Errors", [])
        if errors:
            first = errors[0]
            logger.warning("object storage: %d key(s) of %s not deleted", len(errors), style)
            raise UnavailableError(
                f"object storage: {len(errors)} tile(s) of {style} could not be deleted "
                f"({first.get('Code', '?')}: {first.get('Message', '')})",
                bucket=self.bucket,
                key=first.get("Key", ""),
            )

    def _unavailable(self, action: str, key: str, exc: Exception) -> UnavailableError:
        logger.warning("object storage: %s %s failed: %s", action, key, exc)
        return UnavailableError(
            f"object storage: {action} failed: {storage_reason(exc, self.bucket)}",
            bucket=self.bucket,
            key=key,
        )

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()

    def __enter__(self) -> S3TileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
