"""Tiles in S3-compatible object storage (``isS3=1``), under the same keys as on disk."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Literal, TypeVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
)

from shared.base.s3 import (
    key_prefix,
    missing_as_none,
    s3_client,
    storage_reason,
)
from shared.errors import UnavailableError
from shared.tiles.store import StoredTile, etag_of, key_format
from shared.tiles.styles import check_style_id

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef

__all__ = ["DELETE_BATCH", "S3TileStore"]


T = TypeVar("T")

logger = logging.getLogger(__name__)

#: DeleteObjects takes at most this many keys a call.
DELETE_BATCH = 1000


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
