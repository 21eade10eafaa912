"""Alembic migrations of schema ``mapsvc_auth``, run by `shared.auth.migrate.upgrade`."""
