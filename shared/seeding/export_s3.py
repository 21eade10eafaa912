"""Exports in the object storage bucket (``isS3=1``): ``<prefix>exports/<layer>/<name>``.

An export is written whole to the disk first (:mod:`shared.seeding.export`), then uploaded (a
multipart upload above 8 MiB: the object appears only once every part is there, so no reader
ever sees half of it) and the local file removed. A layer keeps its
:data:`~shared.seeding.export.KEEP_EXPORTS` newest exports in the bucket too. The download route
reads an object a part at a time (HTTP range requests, as a PMTiles reader asks them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import BotoCoreError, ClientError

from shared.base.s3 import is_missing_key, missing_as_none, storage_reason
from shared.errors import UnavailableError
from shared.tiles.s3 import S3TileStore

__all__ = [
    "ExportBucket",
    "ExportObject",
    "MEDIA_TYPES",
    "satisfiable",
    "single_range",
    "well_formed",
]

#: the media type of each archive format
MEDIA_TYPES = {"mbtiles": "application/vnd.sqlite3", "pmtiles": "application/vnd.pmtiles"}
#: one range of bytes (``a-b``, ``a-`` or ``-n``): the only ``Range`` passed on to the bucket
_RANGE = re.compile(r"^bytes=(\d{1,19}-\d{0,19}|-\d{1,19})$")
#: bytes of an object read from the bucket at a time
_CHUNK = 1 << 16


def single_range(header: str | None) -> str | None:
    """``header`` when it asks one range of bytes, else None (the whole object is sent, as
    HTTP lets a server do with a ``Range`` it does not serve)."""
    if header is None:
        return None
    text = header.strip().replace(" ", "")
    return text if _RANGE.fullmatch(text) else None


def well_formed(header: str) -> bool:
    """Whether a ``Range`` header is byte ranges as RFC 9110 writes them (each ``first-last``
    with first <= last, ``first-`` or ``-suffix``); a server ignores one that is not."""
    text = header.strip().replace(" ", "")
    if not text.startswith("bytes="):
        return False
    for spec in text.removeprefix("bytes=").split(","):
        first, dash, last = spec.partition("-")
        if not dash or not (first or last) or not (first + last).isdigit():
            return False
        if first and last and int(first) > int(last):
            return False
    return True


def satisfiable(byte_range: str | None, size: int) -> bool:
    """Whether a file of ``size`` bytes holds some of ``byte_range`` (:func:`single_range`; None:
    the whole file): a range from a first byte past the end, or the last 0 bytes, does not."""
    if byte_range is None:
        return True
    first, _, last = byte_range.removeprefix("bytes=").partition("-")
    if not first:
        return int(last) > 0 and size > 0
    return int(first) < size


@dataclass
class ExportObject:
    """An export (or a part of it) read from the bucket: its bytes as they come, the object's
    size, and the part sent (``Content-Range``; None: the whole)."""

    chunks: Iterator[bytes]
    length: int
    size: int
    content_range: str | None
    etag: str


class ExportBucket:
    """The exports of the tile cache's bucket (its client, bucket and prefix)."""

    def __init__(self, store: S3TileStore) -> None:
        self.store = store
        self.bucket = store.bucket

    def key(self, layer: str, name: str) -> str:
        """The key of the export ``name`` of ``layer`` (the id as one path segment)."""
        return f"{self._folder(layer)}{name}"

    def _folder(self, layer: str) -> str:
        return f"{self.store.prefix}exports/{quote(layer, safe='')}/"

    def upload(self, path: Path, layer: str, name: str, keep: int) -> str:
        """Upload the complete file ``path`` as the export ``name`` of ``layer``, then remove
        the layer's oldest exports beyond ``keep``; the key.

        Raises:
            UnavailableError: the storage failed (nothing is under the key then).
        """
        key = self.key(layer, name)
        media_type = MEDIA_TYPES[path.suffix[1:]]
        try:
            self.store.client.upload_file(
                str(path), self.bucket, key, ExtraArgs={"ContentType": media_type}
            )
            self._prune(layer, keep)
        except (ClientError, BotoCoreError, S3UploadFailedError) as exc:
            raise self._unavailable("storing an export", key, exc) from exc
        return key

    def _prune(self, layer: str, keep: int) -> None:
        pages = self.store.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._folder(layer)
        )
        objects = [item for page in pages for item in page.get("Contents", [])]
        objects.sort(key=lambda item: item["LastModified"], reverse=True)
        old = [{"Key": item["Key"]} for item in objects[keep:]]
        if old:
            self.store.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": old, "Quiet": True},  # type: ignore[typeddict-item]
            )

    def read(self, layer: str, name: str, byte_range: str | None) -> ExportObject | int | None:
        """The export ``name`` of ``layer``, or the part ``byte_range`` (:func:`single_range`)
        of it; the object's size when that range is not in it (``416``); None when there is
        no such export.

        Raises:
            UnavailableError: the storage failed.
        """
        key = self.key(layer, name)
        extra: dict[str, Any] = {"Range": byte_range} if byte_range else {}
        try:
            answer = self.store.client.get_object(Bucket=self.bucket, Key=key, **extra)
        except ClientError as exc:
            if is_missing_key(exc):
                return None
            if exc.response.get("Error", {}).get("Code") != "InvalidRange":
                raise self._unavailable("reading an export", key, exc) from exc
            head = missing_as_none(
                lambda: self.store.client.head_object(Bucket=self.bucket, Key=key),
                lambda error: self._unavailable("reading an export", key, error),
            )
            return None if head is None else head["ContentLength"]
        except BotoCoreError as exc:
            raise self._unavailable("reading an export", key, exc) from exc
        body = answer["Body"]
        content_range = answer.get("ContentRange") if byte_range else None
        size = int(content_range.rsplit("/", 1)[1]) if content_range else answer["ContentLength"]

        def chunks() -> Iterator[bytes]:
            with body:
                yield from body.iter_chunks(_CHUNK)

        return ExportObject(
            chunks(), answer["ContentLength"], size, content_range, answer.get("ETag", "")
        )

    def _unavailable(self, action: str, key: str, exc: Exception) -> UnavailableError:
        return UnavailableError(
            f"object storage: {action} failed: {storage_reason(exc, self.bucket)}",
            bucket=self.bucket,
            key=key,
        )
