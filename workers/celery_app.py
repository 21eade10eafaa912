"""The Celery application of the workers (``celery -A workers.celery_app worker``)."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import setup_logging, worker_process_init

from shared.logs import configure_logging
from shared.queues import celery_config
from shared.settings import Settings

__all__ = ["app", "settings"]

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


@setup_logging.connect
def _logging(**_: Any) -> None:
    # connected, Celery leaves logging to us: its own lines are in our format too
    configure_logging(settings.log_level, settings.log_format)


@worker_process_init.connect
def _reset_connections(**_: Any) -> None:
    # Connections opened in the parent must not be shared with forked children.
    from workers import _job

    _job.reset_store()
