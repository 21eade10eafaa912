"""Demo data (`deploy/demo-data`): rasters copied to the raster store, countries into PostGIS."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pyogrio.raw
from sqlalchemy import Engine, text

from shared.errors import NotFoundError
from shared.raster.store import RasterStore

__all__ = ["COUNTRIES_TABLE", "DEMO_DATA", "copy_rasters", "load_countries"]

log = logging.getLogger(__name__)

#: the repository's demo and test data (``deploy/demo-data``, described by its README.md): the
#: package is installed editable, so the checkout's root is the folder above ``shared/``
DEMO_DATA = Path(__file__).resolve().parents[1] / "deploy" / "demo-data"

COUNTRIES_TABLE = "countries"
_COUNTRIES_SHP = "vector/naturalearth_lowres/naturalearth_lowres.shp"
_COLUMNS = {
    "name": "text",
    "iso_a3": "text",
    "continent": "text",
    "pop_est": "bigint",
    "gdp_md_est": "double precision",
}


def copy_rasters(data_dir: Path, store: RasterStore) -> list[str]:
    """Copy the demo rasters into the raster store, leaving files already there alone.

    Args:
        data_dir: the demo data folder (it is only read), e.g. :data:`DEMO_DATA`.
        store: where the service reads rasters (``<work_dir>/map/raster``, or a bucket).

    Returns:
        The paths (relative to the store's root) copied now.
    """
    source = data_dir / "raster"
    copied = []
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        rel_path = path.relative_to(source).as_posix()
        try:
            store.item(rel_path)
            continue
        except NotFoundError:
            pass
        with store.writing(rel_path) as tmp:
            shutil.copyfile(path, tmp)
        copied.append(rel_path)
    return copied


def load_countries(engine: Engine, data_dir: Path, *, replace: bool = False) -> int:
    """Load the Natural Earth countries into ``public.countries`` (kept when already loaded).

    Args:
        engine: a synchronous engine on the service database.
        data_dir: the demo data folder, e.g. :data:`DEMO_DATA`.
        replace: load again even when the table holds rows.

    Returns:
        The number of countries in the table.
    """
    meta, _, geometries, values = pyogrio.raw.read(data_dir / _COUNTRIES_SHP)
    fields = list(meta["fields"])
    with engine.begin() as conn:
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS postgis"))
        exists = conn.scalar(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": COUNTRIES_TABLE})
        if exists and not replace:
            count: int = conn.scalar(text(f"SELECT count(*) FROM {COUNTRIES_TABLE}")) or 0
            if count:
                return count
        conn.execute(text(f"DROP TABLE IF EXISTS {COUNTRIES_TABLE}"))
        columns = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS.items())
        conn.execute(
            text(
                f"CREATE TABLE {COUNTRIES_TABLE} (id serial PRIMARY KEY, {columns},"
                " geom geometry(MultiPolygon, 4326) NOT NULL)"
            )
        )
        rows = [
            {
                **{name: _plain(values[fields.index(name)][i]) for name in _COLUMNS},
                "wkb": bytes(geometries[i]),
            }
            for i in range(len(geometries))
        ]
        names = ", ".join(_COLUMNS)
        binds = ", ".join(f":{name}" for name in _COLUMNS)
        conn.execute(
            text(
                f"INSERT INTO {COUNTRIES_TABLE} ({names}, geom)"
                f" VALUES ({binds}, ST_Multi(ST_GeomFromWKB(:wkb, 4326)))"
            ),
            rows,
        )
        conn.execute(text(f"CREATE INDEX ON {COUNTRIES_TABLE} USING gist (geom)"))
        conn.execute(text(f"ANALYZE {COUNTRIES_TABLE}"))
    log.info("loaded %d countries into %s", len(rows), COUNTRIES_TABLE)
    return len(rows)


def _plain(value: object) -> object:
    return value.item() if isinstance(value, np.generic) else value
