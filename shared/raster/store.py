"""Where the source rasters are stored: the work dir's ``map/raster``, or an S3 bucket.

``MAPSVC_RASTER_STORE`` chooses (:func:`raster_store`). Both stores answer the same few
questions (:class:`RasterStore`): what is at a path (:class:`StoredItem`), what a folder holds,
a file's first bytes, the path GDAL opens a file by (a local path, or ``/vsis3/<bucket>/<key>``),
and they write a file in one step (written locally, then renamed or uploaded under its final
name). Paths are relative to the store's root and obey the work dir's rules
(:func:`shared.paths.checked_parts`): on a file system they are resolved inside the root (no
symlink leads out), in a bucket they are keys under the prefix.

Mapnik's own GDAL (linked into its ``gdal`` input plugin) is built without curl: it cannot read
``/vsis3/``. So a layer's configuration hands Mapnik local files (:meth:`RasterStore.local_files`):
the files themselves on a file system, copies fetched into the layer's build folder from a bucket.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Protocol, TypeVar
from urllib.parse import urlsplit

from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import BotoCoreError, ClientError

from shared.base.files import atomic_path
from shared.base.s3 import (
    connection_options,
    is_missing_key,
    key_prefix,
    missing_as_none,
    s3_client,
    storage_reason,
)
from shared.errors import ConflictError, InvalidInputError, NotFoundError, UnavailableError
from shared.paths import checked_parts, resolve_inside
from shared.raster.paths import relative
from shared.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "FileRasterStore",
    "RasterStore",
    "S3RasterStore",
    "StoredItem",
    "raster_store",
    "set_gdal_environment",
]

T = TypeVar("T")

#: How messages name the root of either store.
ROOT_NAME = "raster folder"
#: Where an S3 store writes a file before uploading it, inside ``<workDir>/map/derived``.
STAGING_DIR = ".uploads"
#: Bytes a fetch reads from the object at a time.
_FETCH_CHUNK = 1 << 20


@dataclass(frozen=True)
class StoredItem:
    """A file or folder of a raster store.

    ``rel_path`` is its path relative to the store's root (on a file system, of where a symlink
    leads); ``name`` the name it is listed by; ``gdal_path`` what GDAL opens it by. ``version``
    changes whenever the content does: the mtime (ns) of a file on disk, the ETag of an object
    (a folder's: its mtime, or a digest of what it holds).
    """

    rel_path: str
    name: str
    gdal_path: str
    is_dir: bool
    size: int | None
    created: float
    modified: float
    version: int | str

    @property
    def stem(self) -> str:
        """The name without its suffix (``RGB.byte.tif`` -> ``RGB.byte``)."""
        return PurePosixPath(self.name).stem

    @property
    def signature(self) -> tuple[str, int | None, int | str]:
        """What answers about it depend on: where it is, its size and its version."""
        return (self.gdal_path, self.size, self.version)


class RasterStore(Protocol):
    """The source rasters of the service, wherever they are kept."""

    #: ``file`` or ``s3``
    kind: str
    #: whether Mapnik's GDAL cannot read the files where they are (they are copied for it)
    remote: bool

    @property
    def gdal_root(self) -> str:
        """The GDAL path of the root: the files' GDAL paths are ``<gdal_root>/<rel_path>``."""
        ...

    def describe(self) -> str:
        """The store, for cache keys and messages (``file:/srv/work/map/raster``, ``s3://b/p/``)."""
        ...

    def item(self, rel_path: str) -> StoredItem:
        """The file or folder at ``rel_path`` (``""``: the root).

        Raises:
            InvalidInputError: the path breaks the path rules, or leads outside the root.
            NotFoundError: nothing is there.
            UnavailableError: the object storage cannot be reached or refuses access.
        """
        ...

    def children(self, rel_path: str) -> list[StoredItem]:
        """What the folder at ``rel_path`` holds (files and folders, unsorted).

        Raises:
            As :meth:`item`; InvalidInputError too when it is not a folder.
        """
        ...

    def head(self, item: StoredItem, size: int) -> bytes:
        """The first ``size`` bytes of a file (fewer for a shorter one, none if it is gone)."""
        ...

    def file_size(self, gdal_path: str) -> int:
        """The size of a file GDAL names (in the store, or a local one); OSError if missing."""
        ...

    def writing(self, rel_path: str) -> AbstractContextManager[Path]:
        """A local path to write the file at ``rel_path`` to; stored there when the block ends.

        Nothing half-written ever has the final name; on an error nothing is stored.
        """
        ...

    def local_files(self, files: Sequence[StoredItem], into: Path) -> list[Path]:
        """Local paths of ``files`` for Mapnik: the files themselves, or copies in ``into``.

        A copy already in ``into`` is kept (it is only ever written whole).
        """
        ...

    def close(self) -> None:
        """Let go of the store's connections."""
        ...


class FileRasterStore:
    """Rasters in a folder (``<workDir>/map/raster``): paths are resolved inside it."""

    kind = "file"
    remote = False

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def gdal_root(self) -> str:
        """The real path of the folder."""
        return str(self.root.resolve())

    def describe(self) -> str:
        """``file:<the folder's real path>``."""
        return f"file:{self.gdal_root}"

    def _path(self, rel_path: str, *, must_exist: bool = True) -> Path:
        return resolve_inside(self.root, rel_path, root_name=ROOT_NAME, must_exist=must_exist)

    def _item(self, path: Path, real: Path) -> StoredItem:
        st = path.stat()
        is_dir = stat.S_ISDIR(st.st_mode)
        return StoredItem(
            rel_path=relative(self.root, real),
            name=path.name,
            gdal_path=str(path),
            is_dir=is_dir,
            size=None if is_dir else st.st_size,
            created=st.st_ctime,
            modified=st.st_mtime,
            version=st.st_mtime_ns,
        )

    def item(self, rel_path: str) -> StoredItem:
        """The file or folder at ``rel_path``, by its real path (see :class:`RasterStore`)."""
        path = self._path(rel_path)
        return self._item(path, path)

    def children(self, rel_path: str) -> list[StoredItem]:
        """The entries of a folder; broken symlinks and those leading outside are left out."""
        folder = self._path(rel_path)
        if not folder.is_dir():
            raise InvalidInputError(f"{rel_path!r} is not a folder", folder=rel_path)
        items = []
        for entry in folder.iterdir():
            try:
                items.append(self._item(entry, entry.resolve()))
            except (OSError, ValueError):  # broken, or outside the root (ValueError)
                continue
        return items

    def head(self, item: StoredItem, size: int) -> bytes:
        """The file's first bytes (none of a FIFO or a device: reading one could block)."""
        if not Path(item.gdal_path).is_file():
            return b""
        try:
            with open(item.gdal_path, "rb") as f:
                return f.read(size)
        except OSError:
            return b""

    def file_size(self, gdal_path: str) -> int:
        """``os.path.getsize``."""
        return os.path.getsize(gdal_path)

    @contextlib.contextmanager
    def writing(self, rel_path: str) -> Iterator[Path]:
        """A temporary name beside the file, renamed to it (:func:`atomic_path`)."""
        with atomic_path(self._path(rel_path, must_exist=False)) as tmp:
            yield tmp

    def local_files(self, files: Sequence[StoredItem], into: Path) -> list[Path]:
        """The files where they are: Mapnik reads them there."""
        return [Path(f.gdal_path) for f in files]

    def close(self) -> None:
        """Nothing to let go of."""

    def __enter__(self) -> FileRasterStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cause(exc: Exception) -> Exception:
    # boto3 raises a bare S3UploadFailedError while handling the ClientError that says why
    inner = exc.__context__
    return inner if isinstance(exc, S3UploadFailedError) and isinstance(inner, Exception) else exc


class S3RasterStore:
    """Rasters as objects ``<prefix><path>`` of one bucket, read by GDAL through ``/vsis3/``.

    A folder is a key prefix: it exists while some key is under it (or its ``<path>/`` marker
    object). Listings use ListObjectsV2 with the ``/`` delimiter, a page at a time. Files are
    written to ``staging`` first and uploaded once whole: S3 shows an object only when its
    upload completes, so no reader ever sees part of one. Failures of the storage are
    ``UnavailableError`` (503) with a reason fit for a user.
    """

    kind = "s3"
    remote = True

    def __init__(self, client: S3Client, *, bucket: str, prefix: str, staging: Path) -> None:
        """Keep the client; nothing is sent until the first call.

        Args:
            client: an S3 client (:func:`shared.tiles.s3.s3_client`); the store closes it.
            bucket: the bucket of the rasters; it must exist.
            prefix: the folder of the rasters in the bucket (``""``: the bucket's root).
            staging: a local folder for files on their way to the bucket.
        """
        self._client = client
        self.bucket = bucket
        self.prefix = key_prefix(prefix)
        self.staging = staging

    @property
    def gdal_root(self) -> str:
        """``/vsis3/<bucket>`` and the prefix."""
        return f"/vsis3/{self.bucket}/{self.prefix}".rstrip("/")

    def describe(self) -> str:
        """``s3://<bucket>/<prefix>``."""
        return f"s3://{self.bucket}/{self.prefix}"

    def _rel(self, rel_path: str) -> str:
        return "/".join(checked_parts(rel_path, root_name=ROOT_NAME))

    def _gdal(self, key: str) -> str:
        return f"/vsis3/{self.bucket}/{key}"

    def _call(self, action: str, key: str, call: Callable[[], T]) -> T | None:
        """``call()``; None when ``key`` is not stored; other failures: UnavailableError."""
        return missing_as_none(call, lambda exc: self._unavailable(action, key, exc))

    def _unavailable(self, action: str, key: str, exc: Exception) -> UnavailableError:
        return UnavailableError(
            f"object storage: {action} failed: {storage_reason(_cause(exc), self.bucket)}",
            bucket=self.bucket,
            key=key,
        )

    def _file(self, rel: str, size: int, modified: datetime, etag: str) -> StoredItem:
        ts = modified.timestamp()
        return StoredItem(
            rel_path=rel,
            name=PurePosixPath(rel).name,
            gdal_path=self._gdal(self.prefix + rel),
            is_dir=False,
            size=size,
            created=ts,  # an object has one time: when it was last written
            modified=ts,
            version=etag,
        )

    def _folder(self, rel: str, files: Sequence[StoredItem] = (), digest: str = "") -> StoredItem:
        times = [f.modified for f in files] or [0.0]
        return StoredItem(
            rel_path=rel,
            name=PurePosixPath(rel).name,
            gdal_path=self._gdal(self.prefix + rel),
            is_dir=True,
            size=None,
            created=min(times),
            modified=max(times),
            version=digest,
        )

    def _list(self, rel: str) -> tuple[list[StoredItem], list[StoredItem], bool]:
        """The folders and files right under ``rel``, and whether any key is under it."""
        prefix = self.prefix + (f"{rel}/" if rel else "")
        folders: list[StoredItem] = []
        files: list[StoredItem] = []
        found = False

        def pages() -> None:
            nonlocal found
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                for common in page.get("CommonPrefixes", []):
                    name = common.get("Prefix", "")[len(prefix) :].rstrip("/")
                    found = True
                    if name:
                        folders.append(self._folder(f"{rel}/{name}" if rel else name))
                for obj in page.get("Contents", []):
                    name = obj["Key"][len(prefix) :]
                    found = True
                    if name:  # not the folder's own marker object
                        path = f"{rel}/{name}" if rel else name
                        files.append(
                            self._file(path, obj["Size"], obj["LastModified"], obj["ETag"])
                        )

        self._call("listing a folder", prefix, pages)
        return folders, files, found

    def item(self, rel_path: str) -> StoredItem:
        """A HEAD of the key; else the folder of that prefix (see :class:`RasterStore`)."""
        rel = self._rel(rel_path)
        if rel:
            key = self.prefix + rel
            head = self._call(
                "reading a raster",
                key,
                lambda: self._client.head_object(Bucket=self.bucket, Key=key),
            )
            if head is not None:
                return self._file(rel, head["ContentLength"], head["LastModified"], head["ETag"])
        folders, files, found = self._list(rel)
        if rel and not found:
            raise NotFoundError(f"no file {rel_path!r} in the {ROOT_NAME}", path=rel_path)
        held = sorted([f.name, f.version] for f in files) + sorted([f.name] for f in folders)
        digest = hashlib.sha256(json.dumps(held).encode()).hexdigest()[:32]
        return self._folder(rel, files, digest)

    def children(self, rel_path: str) -> list[StoredItem]:
        """One ListObjectsV2 of the folder's prefix with the ``/`` delimiter, page by page."""
        rel = self._rel(rel_path)
        folders, files, found = self._list(rel)
        if rel and not found:
            self.item(rel_path)  # NotFoundError when nothing is there either
            raise InvalidInputError(f"{rel_path!r} is not a folder", folder=rel_path)
        return folders + files

    def head(self, item: StoredItem, size: int) -> bytes:
        """A ranged GET of the object's first bytes."""
        key = self.prefix + item.rel_path

        def read() -> bytes:
            try:
                response = self._client.get_object(
                    Bucket=self.bucket, Key=key, Range=f"bytes=0-{size - 1}"
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                    return b""  # an empty object
                raise
            data: bytes = response["Body"].read()
            return data

        return self._call("reading a raster", key, read) or b""

    def file_size(self, gdal_path: str) -> int:
        """A HEAD of the object a ``/vsis3/`` path names; the size of any other, local file."""
        root = f"/vsis3/{self.bucket}/"
        if not gdal_path.startswith(root):
            return os.path.getsize(gdal_path)
        key = gdal_path[len(root) :]
        head = self._call(
            "reading a raster", key, lambda: self._client.head_object(Bucket=self.bucket, Key=key)
        )
        if head is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", gdal_path)
        return head["ContentLength"]

    @contextlib.contextmanager
    def writing(self, rel_path: str) -> Iterator[Path]:
        """A file in ``staging``, uploaded under the final key once the block ends well."""
        rel = self._rel(rel_path)
        if not rel:
            raise InvalidInputError("a file is written under a path, not the root")
        key = self.prefix + rel
        self.staging.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(
            prefix=".", suffix=f"-{PurePosixPath(rel).name}", dir=self.staging
        )
        os.close(fd)
        tmp = Path(name)
        try:
            yield tmp
            self._call(
                "storing a raster",
                key,
                lambda: self._client.upload_file(str(tmp), self.bucket, key),
            )
        finally:
            for leftover in (tmp, Path(f"{tmp}.ovr"), Path(f"{tmp}.aux.xml")):
                leftover.unlink(missing_ok=True)

    def local_files(self, files: Sequence[StoredItem], into: Path) -> list[Path]:
        """Copies ``into/<name>``, each fetched whole (only if it is still the version listed)."""
        paths = []
        for file in files:
            target = into / file.name
            if not target.is_file():
                with atomic_path(target) as tmp:
                    self._fetch(file, tmp)
            paths.append(target)
        return paths

    def _fetch(self, file: StoredItem, target: Path) -> None:
        """Stream the object into ``target``, if it still has the ETag it was listed with."""
        key = self.prefix + file.rel_path
        try:
            response = self._client.get_object(
                Bucket=self.bucket, Key=key, IfMatch=str(file.version)
            )
            with response["Body"] as body, target.open("wb") as out:
                shutil.copyfileobj(body, out, _FETCH_CHUNK)
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 412:
                raise ConflictError(
                    f"{file.name} changed in the bucket while it was read; try again",
                    file=file.name,
                ) from exc
            if is_missing_key(exc):
                raise NotFoundError(
                    f"{file.name} is gone from the bucket", path=file.rel_path
                ) from exc
            raise self._unavailable("fetching a raster", key, exc) from exc
        except BotoCoreError as exc:
            raise self._unavailable("fetching a raster", key, exc) from exc

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()

    def __enter__(self) -> S3RasterStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def raster_store(settings: Settings) -> RasterStore:
    """The raster store the settings name (``MAPSVC_RASTER_STORE``); no request is sent.

    Args:
        settings: ``raster`` (store, bucket, prefix), ``s3`` (endpoint, keys, region,
            addressing style) and the work dir (folder, or staging for uploads).

    Returns:
        A new store; close it when done (a bucket's holds a client with its connections).
    """
    if settings.raster.store == "file":
        return FileRasterStore(settings.dirs.raster)
    client = s3_client(
        **connection_options(settings.s3),
        # a source is read in one stream when it is fetched: a slow one must not fail
        read_timeout_s=60.0,
    )
    return S3RasterStore(
        client,
        bucket=settings.raster.s3_bucket,
        prefix=settings.raster.s3_prefix,
        staging=settings.dirs.derived / STAGING_DIR,
    )


#: GDAL's AWS_VIRTUAL_HOSTING of each addressing style (``auto``: GDAL's own default)
_VIRTUAL_HOSTING = {"path": "FALSE", "virtual": "TRUE"}


def set_gdal_environment(settings: Settings, environ: MutableMapping[str, str]) -> None:
    """Give GDAL what it needs to read the raster bucket through ``/vsis3/``.

    GDAL reads its ``AWS_*`` options from the process environment, so a process sets them once,
    when it starts, before any raster is opened (the API's factory, the raster worker). Nothing is
    set for the file store.

    Args:
        settings: the ``raster`` and ``s3`` settings.
        environ: the environment to set (``os.environ``).
    """
    if settings.raster.store != "s3" or settings.s3.endpoint_url is None:
        return
    endpoint = urlsplit(settings.s3.endpoint_url)
    values = {
        "AWS_S3_ENDPOINT": endpoint.netloc + endpoint.path.rstrip("/"),
        "AWS_HTTPS": "YES" if endpoint.scheme == "https" else "NO",
        "AWS_REGION": settings.s3.region,
    }
    if settings.s3.addressing_style in _VIRTUAL_HOSTING:
        values["AWS_VIRTUAL_HOSTING"] = _VIRTUAL_HOSTING[settings.s3.addressing_style]
    if settings.s3.access_key_id is not None and settings.s3.secret_access_key is not None:
        values["AWS_ACCESS_KEY_ID"] = settings.s3.access_key_id.get_secret_value()
        values["AWS_SECRET_ACCESS_KEY"] = settings.s3.secret_access_key.get_secret_value()
    environ.update(values)
    # an object replaced under its key must not be read from what GDAL kept of the old one
    # (its size, its blocks, the folder's listing): the rasters' prefix is never cached
    root = f"/vsis3/{settings.raster.s3_bucket}/{key_prefix(settings.raster.s3_prefix)}"
    uncached = [p for p in environ.get("CPL_VSIL_CURL_NON_CACHED", "").split(":") if p]
    if root not in uncached:
        environ["CPL_VSIL_CURL_NON_CACHED"] = ":".join([*uncached, root])
    # an unreachable storage answers within seconds, as the tile cache does (the user's wins)
    environ.setdefault("GDAL_HTTP_CONNECTTIMEOUT", "3")
    environ.setdefault("GDAL_HTTP_TIMEOUT", "30")
