"""Celery workers: tasks that call the domain in ``shared`` and report progress."""
