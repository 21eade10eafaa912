"""``mapsvc watch`` and ``mapsvc follow``: watched vector layers (issue 35, docs/watch.md).

``mapsvc watch <layer>`` installs the layer's triggers straight in the database, as the role of
``--database-url`` (the table's owner, when the service's role may not make triggers);
``--off`` removes them, ``--list`` lists the watched layers. ``mapsvc follow`` runs the
follower that turns the change log into tile expiries (``mapsvc up`` and compose start one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
from typing import Any

from api.front import front_enabled, front_vector_cache
from shared.errors import MapsvcError
from shared.redis_clients import sync_client
from shared.seeding.follow import Follower
from shared.settings import Settings
from shared.tiles.stores import tile_stores
from shared.vector.catalog import Catalogue, VectorLayer
from shared.vector.db import conninfo, make_engine
from shared.vector.watch import start_watching, stop_watching, watched_layers

__all__ = ["COMMANDS", "add_commands", "follower_argv", "run"]

#: the commands of this module
COMMANDS = ("watch", "follow")


def add_commands(sub: Any) -> None:
    """Add ``watch`` and ``follow`` to the ``mapsvc`` argument parser's sub-commands."""
    watch = sub.add_parser(
        "watch", help="watch a vector layer: its edits expire its tiles within seconds"
    )
    watch.add_argument("layer", nargs="?", help="the vector layer's id (schema.table)")
    watch.add_argument("--off", action="store_true", help="stop watching it")
    watch.add_argument("--list", action="store_true", help="list the watched layers")
    watch.add_argument(
        "--database-url",
        default=None,
        help="connect as another role (the table's owner); default: MAPSVC_DATABASE_URL",
    )
    sub.add_parser("follow", help="run the follower of the watched layers (one per deployment)")


def follower_argv() -> list[str]:
    """The command that runs the follower (``mapsvc up``)."""
    return [sys.executable, "-m", "api.cli", "follow"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run ``watch`` or ``follow``; the exit status."""
    if args.command == "follow":
        return _follow(settings)
    info = conninfo(args.database_url or settings.database_url)
    try:
        if args.list:
            print(json.dumps([w.to_json() for w in watched_layers(info)], indent=2))
            return 0
        if not args.layer:
            print("watch: name a layer, or --list", file=sys.stderr)
            return 2
        layer = asyncio.run(_layer(settings, args.layer))
        client = sync_client(settings.redis_url)
        if args.off:
            stop_watching(info, client, layer)
            print(f"{layer.id}: not watched any more")
        else:
            found = start_watching(info, client, layer)
            print(f"{layer.id}: watched since {found.since.isoformat()}")
    except MapsvcError as exc:
        print(f"watch: {exc.message}", file=sys.stderr)
        return 1
    return 0


async def _layer(settings: Settings, layer_id: str) -> VectorLayer:
    """The vector layer of id ``layer_id`` (NotFoundError when none)."""
    engine = make_engine(settings, connections=1)
    try:
        vector = settings.vector
        catalogue = Catalogue(list(vector.schemas), vector.config, vector.catalog_ttl_s)
        return await catalogue.layer(engine, layer_id)
    finally:
        await engine.dispose()


def _follow(settings: Settings) -> int:
    """Run the follower until SIGINT or SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    vector = settings.vector
    with tile_stores(settings) as stores:
        Follower(
            conninfo(settings.database_url),
            sync_client(settings.redis_url),
            stores,
            settings.dirs.mapnik,
            front=front_vector_cache(settings) if front_enabled(settings) else None,
            buffer_px=vector.watch_buffer_px,
            poll_s=vector.watch_poll_s,
            settle_s=vector.watch_settle_s,
        ).run(stop)
    return 0
