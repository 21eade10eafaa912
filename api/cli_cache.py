"""``mapsvc truncate`` and ``mapsvc expire``: remove a layer's cached tiles, through the API.

As ``mapsvc seed`` does, each command is a job of the API (``gis-layer-truncate``,
``gis-layer-expire``), sent with the caller's key (``MAPSVC_KEY``); it prints the tiles per
zoom (``--dryrun``) or follows the job's events to its last line. ``mapsvc expire`` sends an
expire file as osm2pgsql writes it (``-`` reads it from the standard input), or a GeoJSON file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from api.cli_seed import api_client, call_api, follow_job
from api.mounts import V1_PREFIX
from shared.settings import Settings

__all__ = ["COMMANDS", "add_commands", "run"]

#: the commands of this module
COMMANDS = ("truncate", "expire")
_COVERAGE = ("bbox", "bbox_crs", "coverage_layer", "where", "buffer")


def _common(command: Any) -> None:
    command.add_argument("layer", help="the layer: a raster layer's id, or a vector layer's")
    command.add_argument("--minzoom", type=int, default=None, help="first zoom (default: 0)")
    command.add_argument(
        "--maxzoom", type=int, default=None, help="end zoom, excluded (default: 25, every zoom)"
    )
    command.add_argument("--buffer", type=int, default=None, help="pixels around each tile")
    command.add_argument("--dryrun", action="store_true", help="print the tiles per zoom only")
    command.add_argument(
        "--url", default=None, help=f"the API (default: http://127.0.0.1:MAPSVC_PORT{V1_PREFIX})"
    )


def add_commands(sub: Any) -> None:
    """Add ``truncate`` and ``expire`` to the ``mapsvc`` argument parser's sub-commands."""
    truncate = sub.add_parser(
        "truncate", help="remove a layer's cached tiles for a coverage and zooms (through the API)"
    )
    _common(truncate)
    truncate.add_argument("--bbox", help="minx,miny,maxx,maxy")
    truncate.add_argument("--bbox-crs", default=None, help="CRS of --bbox (default EPSG:4326)")
    truncate.add_argument("--geojson", type=Path, help="a file: a GeoJSON (Multi)Polygon")
    truncate.add_argument("--coverage-layer", help="a vector layer whose polygons are the coverage")
    truncate.add_argument("--where", help="CQL2-text filter of the coverage layer's rows")
    truncate.add_argument(
        "--tile-format",
        default=None,
        help="variants, comma-separated (png,webp@2x,…; default: all)",
    )
    truncate.add_argument(
        "--lang", default=None, help="languages, comma-separated (default: every one cached)"
    )
    truncate.add_argument("--s3", action="store_true", help="the bucket's tiles, not the disk's")
    expire = sub.add_parser(
        "expire",
        help="remove (or draw again) the tiles of an expire file or GeoJSON polygon (through"
        " the API)",
    )
    _common(expire)
    expire.add_argument(
        "file", type=Path, help="osm2pgsql's expire file (z/x/y a line; - for stdin), or GeoJSON"
    )
    expire.add_argument(
        "--rerender", action="store_true", help="draw the cached tiles again (raster layers)"
    )


def _query(args: argparse.Namespace) -> dict[str, str]:
    names = ("minzoom", "maxzoom", *_COVERAGE, "tile_format", "lang")
    query = {name: str(getattr(args, name, None)) for name in names}
    query = {k: v for k, v in query.items() if v != "None"}
    if getattr(args, "s3", False):
        query["isS3"] = "1"
    if getattr(args, "rerender", False):
        query["mode"] = "rerender"
    return query | ({"dryrun": "1"} if args.dryrun else {"async": "1"})


def _body(args: argparse.Namespace) -> tuple[bytes | None, str]:
    """The body of the request and its media type (none: a coverage of the query)."""
    if args.command == "expire":
        data = sys.stdin.buffer.read() if str(args.file) == "-" else args.file.read_bytes()
        json_like = data.lstrip()[:1] in (b"{", b"[")
        return data, "application/json" if json_like else "text/plain"
    if args.geojson is not None:
        return json.dumps(json.loads(args.geojson.read_text())).encode(), "application/json"
    return None, ""


def _print_plan(plan: dict[str, Any]) -> None:
    for entry in plan["zooms"]:
        tiles = "too many to count" if entry["tiles"] is None else f"{entry['tiles']} tiles"
        print(f"zoom {entry['zoom']}: {tiles}")
    print(f"total: {plan['total']} tiles")


def _send(client: httpx.Client, args: argparse.Namespace) -> httpx.Response:
    url = f"/gis-layer-{args.command}/{args.layer}"
    body, media = _body(args)
    if body is None:
        return client.post(url, params=_query(args))
    return client.post(url, params=_query(args), content=body, headers={"Content-Type": media})


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run ``mapsvc truncate`` or ``mapsvc expire``; the exit status (2: the API refused the
    request, or the file could not be read)."""
    with api_client(args, settings, 120) as client:
        r = call_api(args.command, lambda: _send(client, args))
        if r is None:
            return 2
        if args.dryrun:
            _print_plan(r.json())
            return 0
        return follow_job(client, r.json())
