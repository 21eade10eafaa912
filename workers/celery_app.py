"""The Celery application of the workers (``celery -A workers.celery_app worker``)."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import (
    setup_logging,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_shutdown,
)

from shared import metrics
from shared.logs import configure_logging
from shared.memory import keep_image_memory
from shared.priority import lower_priority, lower_session_priority
from shared.queues import celery_config
from shared.settings import Settings

__all__ = ["REDIS_OUTAGE_S", "app", "settings"]

#: how long a task's Redis commands and sends wait for Redis to come back (a restart takes
#: seconds) before they fail: a pre-tiling run keeps its chunks in flight instead of losing them
REDIS_OUTAGE_S = 60.0

settings = Settings()
configure_logging(settings.log_level, settings.log_format)

app = Celery(
    "mapsvc",
    include=[
        "workers.tasks.diag",
        "workers.tasks.jobs",
        "workers.tasks.raster",
        "workers.tasks.tiles",
    ],
)
app.config_from_object(celery_config(settings))
# tasks sending tasks (a run's sender, its chunks) wait out a Redis restart too; the API keeps
# the quick policy, so that its requests answer 503 at once
app.conf.task_publish_retry_policy = {
    "max_retries": int(REDIS_OUTAGE_S),
    "interval_start": 0,
    "interval_step": 0.5,
    "interval_max": 1,
}


@setup_logging.connect
def _logging(**_: Any) -> None:
    # connected, Celery leaves logging to us: its own lines are in our format too
    configure_logging(settings.log_level, settings.log_format)


@worker_init.connect
def _yield_as_a_session(**_: Any) -> None:
    # a worker leading its session (a service, `setsid`) is a scheduling group of its own under
    # Linux's autogroup: the group yields to the API's too (shared/priority.py)
    lower_session_priority(settings.jobs.worker_nice)


@worker_process_init.connect
def _yield_cpu(**_: Any) -> None:
    # bulk work yields the CPU to the tiles users wait for (docs/seeding.md "Priorities")
    lower_priority(settings.jobs.worker_nice)


@worker_process_init.connect
def _keep_image_memory(**_: Any) -> None:
    # metatiles are drawn and freed once per chunk: their memory is kept for the next
    keep_image_memory()


@worker_process_shutdown.connect
@worker_shutdown.connect
def _forget_live_gauges(**_: Any) -> None:
    # a worker process that ends takes its live gauges out of /metrics (multiprocess mode)
    metrics.mark_process_dead()
