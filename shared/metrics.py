"""Prometheus metrics of the API and worker processes, added up across processes.

prometheus-client's multiprocess mode: each process started by ``mapsvc serve``, ``worker`` or
``up`` writes its values into files of ``<metrics dir>/<host name>``, the folder the command
puts in ``PROMETHEUS_MULTIPROC_DIR`` before the process starts (the mode is chosen when
prometheus-client is imported). :func:`registry` reads the files of every host and adds them
up; a folder per host, because process ids repeat across containers that share a work dir.

Labels stay few: route templates and status classes, layers (styles), job kinds, providers.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import ParamSpec, TypeVar

import redis
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.queues import QUEUES
from shared.settings import Settings

__all__ = [
    "ENV",
    "HTTP_REQUESTS",
    "HTTP_SECONDS",
    "JOBS_FINISHED",
    "JOBS_STARTED",
    "JOB_SECONDS",
    "PROVIDER_ERRORS",
    "PROVIDER_SECONDS",
    "RENDER_QUEUE",
    "RENDER_SECONDS",
    "VECTOR_SECONDS",
    "CeleryQueues",
    "MetricFiles",
    "count_tile_lookup",
    "exported",
    "mark_process_dead",
    "metrics_root",
    "prepare_dir",
    "registry",
    "timed",
]

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

#: the variable that turns prometheus-client's multiprocess mode on, naming the folder
ENV = "PROMETHEUS_MULTIPROC_DIR"

#: from a cached tile (about a millisecond) to a slow render or query
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_JOB_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)

HTTP_REQUESTS = Counter(
    "mapsvc_http_requests_total",
    "HTTP requests answered, by route template, method and status class",
    ["route", "method", "status"],
)
HTTP_SECONDS = Histogram(
    "mapsvc_http_request_duration_seconds",
    "Time from a request to the end of its answer, by route template, method and status class",
    ["route", "method", "status"],
    buckets=_BUCKETS,
)
_TILE_CACHE = "mapsvc_tile_cache_requests_total"
_TILE_CACHE_HELP = "Raster tiles looked up in the tile cache, by layer and result (hit, miss)"
# Two label sets under one name, chosen by MAPSVC_METRICS_TILE_ZOOM; in no registry, as a
# registry refuses a name twice (values are read back from the files, see `registry`)
_TILE_LOOKUPS = Counter(_TILE_CACHE, _TILE_CACHE_HELP, ["layer", "result"], registry=None)
_TILE_LOOKUPS_BY_ZOOM = Counter(
    _TILE_CACHE, _TILE_CACHE_HELP, ["layer", "zoom", "result"], registry=None
)
RENDER_SECONDS = Histogram(
    "mapsvc_render_duration_seconds",
    "Time to render and encode one image with Mapnik (API render pools and workers), by layer",
    ["layer"],
    buckets=_BUCKETS,
)
RENDER_QUEUE = Gauge(
    "mapsvc_render_queue_length",
    "Renders waiting or running in the render pools of the API processes",
    multiprocess_mode="livesum",
)
JOBS_STARTED = Counter(
    "mapsvc_jobs_started_total",
    "Job runs a worker started, by kind (a job whose worker died is started again)",
    ["kind"],
)
JOBS_FINISHED = Counter(
    "mapsvc_jobs_finished_total",
    "Jobs ended, by kind and outcome (succeeded, failed, cancelled), once each: where its "
    "outcome is recorded (a job that fans out, as pre-tiling does, ends with its last part)",
    ["kind", "outcome"],
)
JOB_SECONDS = Histogram(
    "mapsvc_job_duration_seconds",
    "Time from a job's (last) start, or its creation when it never started, to its end, by "
    "kind and outcome",
    ["kind", "outcome"],
    buckets=_JOB_BUCKETS,
)
PROVIDER_SECONDS = Histogram(
    "mapsvc_provider_request_duration_seconds",
    "Time of each HTTP request to a provider (each retry too), by provider",
    ["provider"],
    buckets=_BUCKETS,
)
PROVIDER_ERRORS = Counter(
    "mapsvc_provider_errors_total",
    "Provider calls that failed after their retries, by provider and error code",
    ["provider", "error"],
)
VECTOR_SECONDS = Histogram(
    "mapsvc_vector_query_duration_seconds",
    "Time of a vector query in PostGIS, by kind (tile: a vector tile; geojson: a GeoJSON "
    "page, up to its first rows when it streams)",
    ["kind"],
    buckets=_BUCKETS,
)

#: kombu's Redis transport keeps a queue's messages of priority 3, 6 and 9 in lists of their own
_PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


def count_tile_lookup(layer: str, hit: bool, zoom: int | None = None) -> None:
    """Count a look-up of a tile of ``layer`` in the tile cache; ``zoom`` None: no zoom label."""
    result = "hit" if hit else "miss"
    if zoom is None:
        _TILE_LOOKUPS.labels(layer, result).inc()
    else:
        _TILE_LOOKUPS_BY_ZOOM.labels(layer, str(zoom), result).inc()


def timed(
    histogram: Histogram,
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
    """A decorator: ``histogram`` observes the seconds of each call of a coroutine function.

    Args:
        histogram: the histogram, its labels given (``VECTOR_SECONDS.labels("tile")``).
    """

    def decorate(func: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        @functools.wraps(func)
        async def timed_call(*args: P.args, **kwargs: P.kwargs) -> T:
            with histogram.time():
                return await func(*args, **kwargs)

        return timed_call

    return decorate


def metrics_root(settings: Settings) -> Path:
    """The folder of every host's metric files (``MAPSVC_METRICS_DIR``, or in the work dir)."""
    return settings.metrics.dir or settings.work_dir / "metrics"


def _host_dir(root: Path) -> Path:
    return root / socket.gethostname()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def prepare_dir(root: Path) -> Path:
    """This host's folder of metric files, made if missing, for ``PROMETHEUS_MULTIPROC_DIR``.

    prometheus-client wants the folder wiped before the processes start. Only the files of
    processes that no longer run are removed: other processes of this host (a worker started
    on its own, say) may be writing theirs.

    Args:
        root: the folder of every host's files (:func:`metrics_root`).

    Returns:
        The folder of this host.
    """
    here = _host_dir(root)
    here.mkdir(parents=True, exist_ok=True)
    for path in here.glob("*.db"):
        pid = path.stem.rpartition("_")[2]  # <type>[_<mode>]_<pid>.db
        if pid.isdigit() and not _running(int(pid)):
            path.unlink(missing_ok=True)
    return here


def exported(settings: Settings) -> bool:
    """Whether this process writes its metrics where ``/metrics`` reads them."""
    path = os.environ.get(ENV)
    return path is not None and Path(path).resolve() == _host_dir(metrics_root(settings)).resolve()


def mark_process_dead(pid: int | None = None) -> None:
    """Drop the live gauges of a process that ends (this one by default), in multiprocess mode."""
    path = os.environ.get(ENV)
    if path:
        multiprocess.mark_process_dead(pid or os.getpid(), path)  # type: ignore[no-untyped-call]


class MetricFiles(Collector):
    """The values every process wrote under ``root`` (a folder per host), added up."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _merged(self) -> Iterable[Metric]:
        files = [str(path) for path in self.root.glob("*/*.db")]
        merge = multiprocess.MultiProcessCollector.merge
        merged: Iterable[Metric] = merge(files)  # type: ignore[no-untyped-call]
        return merged

    def collect(self) -> Iterable[Metric]:  # noqa: D102
        try:
            return self._merged()
        except FileNotFoundError:  # a command starting removed a dead process's file meanwhile
            return self._merged()


class CeleryQueues(Collector):
    """The messages waiting in each Celery queue, read from Redis when collected."""

    def __init__(self, client: redis.Redis, queues: Sequence[str] | None = None) -> None:
        self.client = client
        self.queues = sorted(set(QUEUES.values())) if queues is None else list(queues)

    def collect(self) -> Iterator[Metric]:  # noqa: D102
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for queue in self.queues:
                    for suffix in _PRIORITY_SUFFIXES:
                        pipe.llen(queue + suffix)
                lengths = pipe.execute()
        except redis.RedisError as exc:  # the rest of the metrics still answer
            log.warning("metrics: the Celery queue lengths could not be read: %s", exc)
            return
        family = GaugeMetricFamily(
            "mapsvc_celery_queue_length",
            "Messages waiting in each Celery queue (Redis LLEN when scraped)",
            labels=["queue"],
        )
        step = len(_PRIORITY_SUFFIXES)
        for i, queue in enumerate(self.queues):
            family.add_metric([queue], sum(lengths[i * step : (i + 1) * step]))
        yield family


def registry(root: Path, client: redis.Redis) -> CollectorRegistry:
    """What ``/metrics`` answers: every process's metrics under ``root``, the Celery queues.

    Args:
        root: the folder of every host's metric files (:func:`metrics_root`).
        client: Redis, the Celery broker.
    """
    found = CollectorRegistry(auto_describe=False)
    found.register(MetricFiles(root))
    found.register(CeleryQueues(client))
    return found
