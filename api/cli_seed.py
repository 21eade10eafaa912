"""``mapsvc seed``: pre-tile a layer over a coverage, through the API.

A seeding run is a job of the API (its lock, plan, ceiling and event stream are the API's), so
the command calls ``GET`` (or, with ``--geojson``, ``POST``) ``/gis-layer-pretile/<layer>`` with
the caller's key, prints the plan (``--dryrun``) or follows the job's events to its last line;
``--resume`` continues the layer's interrupted last run (``POST /seeds/<run>/resume``),
``--cancel`` cancels its runs (``DELETE /seeds?layer=<layer>``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from api.mounts import V1_PREFIX
from shared.settings import Settings

__all__ = ["add_command", "api_client", "call_api", "follow_job", "run"]

#: the environment variable holding the API key the command sends
KEY_ENV = "MAPSVC_KEY"


def add_command(sub: Any) -> None:
    """Add ``seed`` to the ``mapsvc`` argument parser's sub-commands."""
    seed = sub.add_parser("seed", help="pre-tile a layer over a coverage (through the API)")
    seed.add_argument("layer", help="the raster layer id")
    seed.add_argument("--minzoom", type=int, default=None, help="first zoom (API default: 6)")
    seed.add_argument("--maxzoom", type=int, default=None, help="end zoom, excluded (16)")
    seed.add_argument("--bbox", help="minx,miny,maxx,maxy")
    seed.add_argument("--bbox-crs", default=None, help="CRS of --bbox (default EPSG:4326)")
    seed.add_argument("--geojson", type=Path, help="a file: a GeoJSON (Multi)Polygon or Feature")
    seed.add_argument("--coverage-layer", help="a vector layer whose polygons are the coverage")
    seed.add_argument("--where", help="CQL2-text filter of the coverage layer's rows")
    seed.add_argument("--buffer", type=int, default=None, help="pixels around each tile")
    seed.add_argument("--tile-format", default=None, help="png (default), webp, jpg, each with @2x")
    seed.add_argument("--dryrun", action="store_true", help="print the plan, render nothing")
    seed.add_argument(
        "--refresh-before", help="render again cached tiles older than this: ISO time or age (7d)"
    )
    seed.add_argument("--max-tiles-per-s", type=float, help="pace of the run (tiles a second)")
    seed.add_argument(
        "--resume",
        action="store_true",
        help="continue the layer's interrupted last run (its chunks done are not made again)",
    )
    seed.add_argument(
        "--cancel", action="store_true", help="cancel every run of the layer not ended"
    )
    seed.add_argument(
        "--url",
        default=None,
        help=f"the API (default: http://127.0.0.1:MAPSVC_PORT{V1_PREFIX})",
    )


def _query(args: argparse.Namespace) -> dict[str, str]:
    if args.resume:
        return {"async": "1"}
    names = ("minzoom", "maxzoom", "bbox", "bbox_crs", "coverage_layer", "where", "buffer")
    more = ("tile_format", "refresh_before", "max_tiles_per_s")
    query = {name: str(getattr(args, name)) for name in (*names, *more)}
    query = {k: v for k, v in query.items() if v != "None"}
    return query | ({"dryrun": "1"} if args.dryrun else {"async": "1"})


def _print_plan(plan: dict[str, Any]) -> None:
    for entry in plan["zooms"]:
        state = "" if entry["tiled"] else " (cut by the cap)"
        print(f"zoom {entry['zoom']}: {entry['tiles']} tiles{state}")
    print(f"total: {plan['total']} tiles")


def follow_job(client: httpx.Client, job: dict[str, Any]) -> int:
    """Print the job's event lines until its last; 0 when it succeeded."""
    print(f"job {job['id']}")
    with client.stream("GET", f"/jobs/{job['id']}/events", timeout=None) as events:
        for line in events.iter_lines():
            if not line.startswith("data: "):
                continue
            text = line[len("data: ") :]
            print(text)
            if text.startswith("Finish:"):
                return 0 if text == "Finish:success" else 1
    return 1


def api_client(args: argparse.Namespace, settings: Settings, timeout: float) -> httpx.Client:
    """A client of the API the command names (``--url``, default this host's ``/api/v1``),
    sending the key of ``MAPSVC_KEY``."""
    base = (args.url or f"http://127.0.0.1:{settings.port}{V1_PREFIX}").rstrip("/")
    key = os.environ.get(KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=base, headers=headers, timeout=timeout)


def call_api(command: str, send: Callable[[], httpx.Response]) -> httpx.Response | None:
    """``send()``'s answer; None, with why on the standard error, when the request could not
    be made (a file unread, the API unreachable) or the API refused it."""
    try:
        r = send()
    except (OSError, ValueError, httpx.HTTPError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None
    if r.status_code >= 400:
        print(f"{command}: {r.status_code} {r.text}", file=sys.stderr)
        return None
    return r


def _send(client: httpx.Client, args: argparse.Namespace) -> httpx.Response:
    url = f"/gis-layer-pretile/{args.layer}"
    if args.cancel:
        return client.delete("/seeds", params={"layer": args.layer})
    if args.resume:
        last = client.get("/seeds", params={"layer": args.layer, "limit": 1})
        if last.status_code != 200 or not last.json()["seeds"]:
            return last if last.status_code != 200 else _no_run(last, args.layer)
        run = last.json()["seeds"][0]["id"]
        return client.post(f"/seeds/{run}/resume", params=_query(args))
    if args.geojson is not None:
        body = json.loads(args.geojson.read_text())
        return client.post(url, params=_query(args), json=body)
    return client.get(url, params=_query(args))


def _no_run(answer: httpx.Response, layer: str) -> httpx.Response:
    """A refusal as the API would say it: the layer has no run to resume."""
    error = {"code": "unprocessable", "message": f"layer {layer} has no seeding run to resume"}
    return httpx.Response(422, json={"error": error}, request=answer.request)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run ``mapsvc seed``; the exit status (2: the API refused the request)."""
    with api_client(args, settings, 60) as client:
        r = call_api("seed", lambda: _send(client, args))
        if r is None:
            return 2
        if args.dryrun:
            _print_plan(r.json())
            return 0
        if args.cancel:
            for job_id in r.json()["cancelled"]:
                print(f"cancelled job {job_id}")
            return 0
        return follow_job(client, r.json())
