"""Watched vector layers (issue 35): maps that follow their PostGIS data within seconds.

An admin watches a layer (``PUT /watches/{layer}``): PostgreSQL then logs where each change of
its table happened, and the follower (``mapsvc follow``) drops the tiles each change made stale
from every cache, and says so on the layer's stream (``GET /watches/{layer}/events``), which
the viewer follows to draw the layer again. See docs/watch.md.
"""

from __future__ import annotations

import functools

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.access import Rule
from api.endpoint import Endpoint
from api.fields import Query, layer_id
from api.openapi.answers import json_body
from api.openapi.models import WatchedLayer, WatchList
from api.services import services
from api.sse import LAST_EVENT_ID, SSE_ANSWER, EventsQuery, resume_point, sse_response
from shared.seeding.follow import LEASE_KEY, POSITION_KEY, layer_stream
from shared.vector.catalog import VectorLayer
from shared.vector.db import conninfo
from shared.vector.watch import start_watching, stop_watching, watched_layers

__all__ = ["ENDPOINTS"]


class WatchQuery(Query):
    """A vector layer to watch, or not: looked up in the catalogue read afresh (a table just
    made can be watched at once)."""

    layer: str = layer_id()

    @property
    def reads_catalogue_again(self) -> bool:
        return True


class LayerEventsQuery(EventsQuery):
    """A watched layer's changes, and where its stream resumes."""

    layer: str = layer_id()


class ListQuery(Query):
    """The watched layers."""


async def list_watches(request: Request, query: ListQuery) -> JSONResponse:
    """The watched layers, and the follower: whether one runs (``running``: its name) and the
    last change it expired (``position``)."""
    svc = services(request)
    found = await run_in_threadpool(watched_layers, conninfo(svc.settings.database_url))
    client = svc.jobs.aredis
    running, position = await client.get(LEASE_KEY), await client.get(POSITION_KEY)
    return JSONResponse(
        {
            "layers": [w.to_json() for w in found],
            "follower": {"running": running, "position": int(position or 0)},
        }
    )


async def put_watch(request: Request, query: WatchQuery, layer: VectorLayer) -> JSONResponse:
    """Watch a vector layer: its table's triggers made (again: idempotent), and the layer
    listed. ``403`` when the database role may not make triggers on the table (run ``mapsvc
    watch`` as its owner), ``422`` for a view."""
    svc = services(request)
    found = await run_in_threadpool(
        start_watching, conninfo(svc.settings.database_url), svc.jobs.store.client, layer
    )
    return JSONResponse(found.to_json())


async def delete_watch(request: Request, query: WatchQuery, layer: VectorLayer) -> Response:
    """Stop watching a vector layer: its triggers removed (``404`` when it is not watched)."""
    svc = services(request)
    await run_in_threadpool(
        stop_watching, conninfo(svc.settings.database_url), svc.jobs.store.client, layer
    )
    return Response(status_code=204)


async def get_watch_events(
    request: Request, query: LayerEventsQuery, layer: VectorLayer
) -> Response:
    """A layer's ``layer-changed`` lines as SSE, as the follower expires its changes: each a
    JSON object (``layer``, ``bbox``: where, null for everywhere, ``tiles``: how many cached
    tiles were dropped, ``changes``, ``seconds``). New lines only, unless resumed."""
    return await sse_response(
        request,
        services(request).jobs,
        layer_stream(layer.id),
        resume_point(request, query.after, "$"),
        end_on_final=False,
        with_job_id=False,
    )


_admin = functools.partial(
    Endpoint,
    rule=Rule("admin", layers=("layer",)),
    budget="admin",
    query=WatchQuery,
    errors=(403, 404, 422),
    resolves="vector",
    database=True,
    tag="vector",
)

ENDPOINTS = [
    Endpoint(
        "GET",
        "/watches",
        list_watches,
        rule=Rule("admin"),
        budget="admin",
        query=ListQuery,
        answer={"200": json_body(WatchList, "The watched layers, and the follower")},
        database=True,
        tag="vector",
    ),
    _admin(
        "PUT",
        "/watches/{layer}",
        put_watch,
        answer={"200": json_body(WatchedLayer, "The layer, watched")},
    ),
    _admin(
        "DELETE",
        "/watches/{layer}",
        delete_watch,
        answer={"204": {"description": "Not watched any more"}},
    ),
    Endpoint(
        "GET",
        "/watches/{layer}/events",
        get_watch_events,
        rule=Rule("reader", layers=("layer",), public=True),
        budget="data",
        query=LayerEventsQuery,
        headers=(LAST_EVENT_ID,),
        answer=SSE_ANSWER,
        errors=(404,),
        resolves="vector",
        tag="vector",
    ),
]
