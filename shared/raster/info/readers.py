"""Per-file reader threads: each file is read in a thread that has read no other file."""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from shared.raster.truncation import SizeOf

__all__ = ["ThreadPerFile"]

#: Reads a file (named as GDAL opens it), finding file sizes with the second argument.
Read = Callable[[str, SizeOf], dict[str, Any]]
_Job = tuple[str, SizeOf, Future[dict[str, Any]]]


class ThreadPerFile:
    """Reads each file in a thread that has read no other file.

    GDAL keeps one PROJ context per thread, and its object cache leaks from file to file:
    after a UTM GeoTIFF an EPSG:4326 one comes back with the WGS 84 datum instead of its
    ensemble, or the other way round. A thread of its own reads each file as a fresh gdalinfo
    would. Making a thread's PROJ context costs more than reading the file, so the thread of
    a file is kept (the most recent ``size`` of them) for the next read of the same file.
    """

    def __init__(self, read: Read, size: int = 32) -> None:
        self._read = read
        self._size = size
        self._lock = threading.Lock()
        self._readers: OrderedDict[str, _Reader] = OrderedDict()

    def run(self, path: str, size_of: SizeOf) -> dict[str, Any]:
        """Read ``path`` in its own thread and return what the read function gives."""
        with self._lock:
            reader = self._readers.pop(path, None) or _Reader(self._read)
            self._readers[path] = reader
            if len(self._readers) > self._size:
                self._readers.popitem(last=False)[1].stop()
        return reader.read(path, size_of)


class _Reader:
    """One thread that reads the files handed to it, one at a time."""

    def __init__(self, read: Read) -> None:
        self._read = read
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        threading.Thread(target=self._main, name="raster-info", daemon=True).start()

    def _main(self) -> None:
        while (job := self._jobs.get()) is not None:
            path, size_of, result = job
            try:
                result.set_result(self._read(path, size_of))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
                result.set_exception(exc)

    def read(self, path: str, size_of: SizeOf) -> dict[str, Any]:
        result: Future[dict[str, Any]] = Future()
        self._jobs.put((path, size_of, result))
        return result.result()

    def stop(self) -> None:
        self._jobs.put(None)
