"""Celery configuration as plain data, shared by the workers and the API's client, and the
jobs' kinds: each one's name, task and message (:mod:`shared.job_messages`), read by the API
(which sends them) and the workers (which run them).

Kept free of Celery imports so that the domain stays importable without it. Queues are by kind of
work, so a host can run workers for one kind only (``mapsvc worker -Q tiles``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from shared import job_messages as messages
from shared.job_messages import JobMessage
from shared.settings import Settings

__all__ = [
    "CHUNK_TASK",
    "EXPIRE",
    "EXPORT",
    "JobKind",
    "PRETILE",
    "PROBE",
    "QUEUES",
    "RASTER_COMPRESS",
    "RASTER_CONFIG",
    "SEND_CHUNKS_TASK",
    "SPEED_TEST",
    "TRUNCATE",
    "WATCHDOG_TASK",
    "celery_config",
]

#: Queue of each task-name prefix.
QUEUES = {"diag": "default", "jobs": "default", "raster": "raster", "tiles": "tiles"}


M = TypeVar("M", bound=JobMessage)


@dataclass(frozen=True)
class JobKind(Generic[M]):
    """A kind of job: the name its records carry (``/jobs?kind=``), the Celery task that runs
    it (the task name's prefix picks its queue, :data:`QUEUES`), and its message."""

    kind: str
    task: str
    message: type[M]

    def read(self, params: Mapping[str, Any]) -> M:
        """The message of a job of this kind sent as ``params``.

        Raises:
            TypeError: ``params`` are not such a message.
        """
        return self.message.of(params)


PROBE = JobKind("probe", "diag.probe", messages.Probe)
RASTER_CONFIG = JobKind("raster-config", "raster.configure", messages.RasterConfig)
RASTER_COMPRESS = JobKind("raster-compress", "raster.compress", messages.RasterCompress)
PRETILE = JobKind("pretile", "tiles.pretile", messages.Pretile)
SPEED_TEST = JobKind("speed-test", "tiles.speed_test", messages.SpeedTest)
EXPORT = JobKind("export", "tiles.export", messages.Export)
TRUNCATE = JobKind("truncate", "tiles.truncate", messages.Sweep)
EXPIRE = JobKind("expire", "tiles.expire", messages.Sweep)
#: the tasks that are steps of a pre-tiling job: sending its chunks, rendering one
SEND_CHUNKS_TASK = "tiles.send_chunks"
CHUNK_TASK = "tiles.chunk"
#: the task that ends the jobs whose workers are gone (sent by each worker's beat)
WATCHDOG_TASK = "jobs.watchdog"


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings of every process that sends or runs jobs.

    Args:
        settings: the service settings (Redis URL, time limits).

    Returns:
        A mapping for ``Celery.config_from_object``.
    """
    # Redis re-delivers an unacknowledged message after the visibility timeout: it must be
    # longer than any job may run, or a slow job would be run twice at once.
    visibility_timeout = settings.jobs.time_limit_s + 600
    return {
        "broker_url": settings.redis_url,
        "result_backend": settings.redis_url,
        "broker_transport_options": {"visibility_timeout": visibility_timeout},
        "result_backend_transport_options": {"visibility_timeout": visibility_timeout},
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": 3,
        "task_publish_retry_policy": {
            "max_retries": 2,
            "interval_start": 0.2,
            "interval_step": 0.5,
        },
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_expires": settings.jobs.events_ttl_s,
        "task_track_started": True,
        "task_soft_time_limit": settings.jobs.soft_time_limit_s,
        "task_time_limit": settings.jobs.time_limit_s,
        "task_default_queue": "default",
        "task_routes": {f"{prefix}.*": {"queue": queue} for prefix, queue in QUEUES.items()},
        # One message at a time per process: jobs are long, and a prefetched one would wait
        # behind a busy process while another process is idle.
        "worker_prefetch_multiplier": 1,
        # Recycling: a long-running deployment does not grow without bound (None: never)
        "worker_max_tasks_per_child": settings.jobs.worker_max_tasks_per_child or None,
        "worker_max_memory_per_child": settings.jobs.worker_max_memory_mb * 1024 or None,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "worker_hijack_root_logger": False,
        # A task running when the broker connection drops runs on (Celery 5's behaviour, which
        # the fault tests hold): its message comes back once Redis does, and a chunk or a job
        # that runs twice counts once. Pinned, as Celery 6 changes the default.
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        # The watchdog, sent by the beat embedded in each `mapsvc worker` (docs/safety.md "Jobs and
        # event streams"). It is idempotent, so several beats are harmless; a run not taken
        # before the next one is due is dropped. The schedule is one interval: kept in memory,
        # no schedule file.
        "beat_scheduler": "celery.beat:Scheduler",
        "beat_schedule": {
            "jobs-watchdog": {
                "task": WATCHDOG_TASK,
                "schedule": settings.jobs.watchdog_interval_s,
                "options": {"expires": settings.jobs.watchdog_interval_s},
            }
        },
    }
