"""Demo data: the shared rasters copied into the work dir, the countries loaded into PostGIS."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pyogrio.raw
from sqlalchemy import Engine, text

from shared.workdir import WorkDir

__all__ = ["COUNTRIES_TABLE", "copy_rasters", "default_data_dir", "load_countries"]

log = logging.getLogger(__name__)

COUNTRIES_TABLE = "countries"
_COUNTRIES_SHP = "vector/naturalearth_lowres/naturalearth_lowres.shp"
_COLUMNS = {
    "name": "text",
    "iso_a3": "text",
    "continent": "text",
    "pop_est": "bigint",
    "gdp_md_est": "double precision",
}


def default_data_dir() -> Path:
    """The ``shared/data`` folder beside the checkout."""
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def copy_rasters(data_dir: Path, work_dir: Path) -> list[Path]:
    """Copy the demo rasters into ``<work_dir>/map/raster``, leaving existing files alone.

    Args:
        data_dir: the shared data folder (it is only read).
        work_dir: the service's work dir.

    Returns:
        The files copied now.
    """
    source = data_dir / "raster"
    target = WorkDir(work_dir).raster
    copied = []
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        dest = target / path.relative_to(source)
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp")
        shutil.copyfile(path, tmp)
        tmp.replace(dest)
        copied.append(dest)
    return copied


def load_countries(engine: Engine, data_dir: Path, *, replace: bool = False) -> int:
    """Load the Natural Earth countries into ``public.countries`` (kept when already loaded).

    Args:
        engine: a synchronous engine on the service database.
        data_dir: the shared data folder.
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
