"""Pre-tiling's state in Redis (spec 4.2): a run's progress, its layer's lock, the places of
runs, and resuming (the plan and its chunks: :mod:`shared.seeding.plan`).

Counters in Redis add up what the chunks did,
and the chunk that completes the count ends the run (chunks whose worker died are delivered
again, so no chord has to wait for them). A lock in Redis lets one run per layer go at a time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, cast

import redis

from shared.base.grid import TileAddress
from shared.errors import (
    ConflictError,
    NotFoundError,
    UnavailableError,
    UnprocessableError,
)
from shared.jobs import COUNT_IF_EXISTS, FINISH_ERROR, JobRecord, JobStore
from shared.queues import PRETILE
from shared.seeding.plan import CHUNK, Chunk, tile_name

__all__ = [
    "RESUME_SILENT_S",
    "PretileCounters",
    "LayerLock",
    "RunSlots",
    "free_run",
    "resumable",
    "supersede",
]


# KEYS: the run's hash, its set of counted chunks, its set of chunks to redo (cancelled or given
# up), its list of failed tiles. ARGV: chunk id, chunk size, error, '1' when the chunk is done
# clean, its failed tiles ('z/x/y' separated by spaces), then the count fields, then their
# increments. Returns whether this chunk completed the run, and the failed tiles so far.
_ADD_CHUNK = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return {0, 0} end
local ttl = redis.call('TTL', KEYS[1])
redis.call('EXPIRE', KEYS[2], ttl)
redis.call('HDEL', KEYS[1], 'attempt:' .. ARGV[1])
local n = (#ARGV - 5) / 2
for i = 1, n do redis.call('HINCRBY', KEYS[1], ARGV[5 + i], ARGV[5 + n + i]) end
if ARGV[3] ~= '' then redis.call('HSETNX', KEYS[1], 'first_error', ARGV[3]) end
if ARGV[4] ~= '1' then
  redis.call('SADD', KEYS[3], ARGV[1])
  redis.call('EXPIRE', KEYS[3], ttl)
end
for tile in string.gmatch(ARGV[5], '%S+') do redis.call('RPUSH', KEYS[4], tile) end
if ARGV[5] ~= '' then redis.call('EXPIRE', KEYS[4], ttl) end
local failed = tonumber(redis.call('HGET', KEYS[1], 'failed_tiles') or '0')
local finished = redis.call('HINCRBY', KEYS[1], 'finished_tiles', ARGV[2])
local plan = cjson.decode(redis.call('HGET', KEYS[1], 'plan'))
if finished >= plan['total'] then return {1, failed} end
return {0, failed}
"""


#: what a chunk's tiles became, counted per zoom for the summary (``clean``: the tiles of the
#: chunks done without an error, which a resumed run does not make again)
_COUNTS = ("rendered", "skipped", "empty", "failed")
#: the parts of the counters, beside the hash: counted chunks, chunks to redo, failed tiles
_PARTS = ("chunks", "redo", "failed")


class PretileCounters:
    """What the chunks of a run did, added up in one Redis hash per run.

    The hash holds the plan, the run's parameters (``run``: JSON, read by a resume and the
    seeds collection), the counts per zoom and per worker; beside it, the set of counted chunks
    (each counts once), those a resumed run makes again, and the list of failed tiles.
    """

    def __init__(self, client: redis.Redis, job_id: str, ttl_s: int) -> None:
        self.client = client
        self.job_id = job_id
        self.key = f"mapsvc:pretile:{job_id}"
        self.ttl_s = ttl_s
        self._add = client.register_script(_ADD_CHUNK)
        self._attempt = client.register_script(COUNT_IF_EXISTS)

    def _part(self, name: str) -> str:
        return f"{self.key}:{name}"

    def exists(self) -> bool:
        """Whether the run's counters are still kept (they expire with the job's events)."""
        return bool(self.client.exists(self.key))

    def start(self, plan: dict[str, Any], run: dict[str, Any] | None = None) -> None:
        """Record the plan, the run's parameters and the start time (kept when the start runs
        again)."""
        pipe = self.client.pipeline()
        pipe.hsetnx(self.key, "plan", json.dumps(plan))
        pipe.hsetnx(self.key, "started", repr(time.time()))
        if run is not None:
            pipe.hsetnx(self.key, "run", json.dumps(run))
        pipe.expire(self.key, self.ttl_s)
        pipe.execute()

    def resume(self, old: PretileCounters) -> int:
        """Start as the continuation of ``old``: its plan and parameters, and its chunks done
        clean counted as done (``resumed``) so that they are not made again.

        Returns:
            The tiles already done.

        Raises:
            UnprocessableError: ``old``'s counters are gone (expired) or were written by a
                version without what a resume needs.
        """
        data: dict[str, str] = self.client.hgetall(old.key)  # type: ignore[assignment]
        if "run" not in data:
            raise UnprocessableError(
                f"the progress of job {old.job_id} is no longer kept: start a new run"
            )
        plan = json.loads(data["plan"])
        done = {
            e["zoom"]: int(data.get(f"z:{e['zoom']}:clean", 0)) for e in plan["zooms"] if e["tiled"]
        }
        pipe = self.client.pipeline()
        fields = {"plan": data["plan"], "run": data["run"], "started": repr(time.time())}
        fields["resumed_of"] = old.job_id
        fields["finished_tiles"] = str(sum(done.values()))
        for z, tiles in done.items():
            fields[f"z:{z}:clean"] = fields[f"z:{z}:resumed"] = str(tiles)
        pipe.delete(self.key, *(self._part(p) for p in _PARTS))
        pipe.hset(self.key, mapping=fields)  # type: ignore[arg-type]
        pipe.sdiffstore(self._part("chunks"), [old._part("chunks"), old._part("redo")])
        pipe.srem(self._part("chunks"), "rest")
        for name in ("", *(f":{p}" for p in _PARTS)):
            pipe.expire(self.key + name, self.ttl_s)
        pipe.execute()
        return sum(done.values())

    def end(self) -> None:
        """Record the end of the run (its seconds and rate stop there)."""
        self.mark("ended")

    def mark(self, name: str) -> bool:
        """Mark the run with ``name`` (``queued``, ``too_many_failed``, ``ended``), at this
        time; whether this call did (not an earlier one)."""
        return bool(self.client.hsetnx(self.key, name, repr(time.time())))

    def marked(self, name: str) -> bool:
        """Whether the run is marked with ``name``."""
        return bool(self.client.hexists(self.key, name))

    def run(self) -> dict[str, Any]:
        """The run's parameters, as :meth:`start` recorded them."""
        run: dict[str, Any] = json.loads(cast(str, self.client.hget(self.key, "run")))
        return run

    def done_chunks(self, batch: Sequence[Chunk]) -> list[bool]:
        """Which chunks of ``batch`` are counted already (done before a resume)."""
        if not batch:
            return []
        found = self.client.smismember(self._part("chunks"), [_member(c) for c in batch])
        return [bool(f) for f in found]

    def attempt(self, chunk: Chunk) -> int:
        """Count a start of a chunk (a chunk whose worker died is delivered again; a chunk that
        failed is sent again).

        Returns:
            The starts of the chunk so far; 0 when the run's counters are gone (expired), so
            that a chunk delivered that late writes no key without a TTL.
        """
        field = f"attempt:{_member(chunk)}"
        return int(self._attempt(keys=[self.key], args=[field, self.ttl_s]))

    def add(
        self,
        chunk: Chunk,
        counts: dict[str, int],
        error: str | None = None,
        worker: str = "",
        failed: Sequence[TileAddress] = (),
    ) -> tuple[bool, int]:
        """Add what one chunk did (``rendered``, ``skipped``, ``empty``, ``cancelled``), once.

        A chunk counts once, however often it runs (a chunk whose worker died is delivered
        again, and a plan whose worker died is sent again): in one atomic step. Its tiles,
        cancelled ones too, count towards the end of the run; the summary counts the rest,
        and, when ``worker`` names the worker that did the chunk, what each worker did.
        ``failed`` are the tiles of a chunk given up (``error``) that were not made.

        Returns:
            Whether this chunk completed the run (every tile of the plan accounted for), and
            the failed tiles of the run so far.
        """
        counts = {**counts, "failed": len(failed)}
        fields = [f"z:{chunk.z}:{name}" for name in _COUNTS]
        values = [counts.get(name, 0) for name in _COUNTS]
        clean = error is None and not counts.get("cancelled")
        if clean:
            fields.append(f"z:{chunk.z}:clean")
            values.append(chunk.size)
        if failed:
            fields.append("failed_tiles")
            values.append(len(failed))
        if worker:
            fields += [f"worker:{worker}:chunks", f"worker:{worker}:rendered"]
            values += [1, counts.get("rendered", 0)]
        if error is not None:
            fields.append(f"z:{chunk.z}:errors")
            values.append(1)
        names = " ".join(tile_name(t) for t in failed)
        return self._count(_member(chunk), chunk.size, error, clean, names, fields, values)

    def add_rest(self, tiles: int) -> bool:
        """Count the ``tiles`` of the chunks never sent (the run was cancelled), once.

        Returns:
            Whether this completed the run.
        """
        return self._count("rest", tiles, None, False, "", [], [])[0]

    def _count(
        self,
        member: str,
        size: int,
        error: str | None,
        clean: bool,
        failed: str,
        fields: list[str],
        values: list[int],
    ) -> tuple[bool, int]:
        last, failed_before = self._add(
            keys=[self.key, *(self._part(p) for p in _PARTS)],
            args=[member, size, error or "", "1" if clean else "0", failed, *fields, *values],
        )
        return bool(last), int(failed_before)

    def failed_tiles(self, limit: int) -> list[str]:
        """The run's failed tiles (``z/x/y``), the first ``limit``."""
        return cast(list[str], self.client.lrange(self._part("failed"), 0, limit - 1))

    def summary(self) -> dict[str, Any]:
        """The plan, per-zoom counts, totals, rate and the seconds from the start (to the end).

        ``done`` counts the tiles made or found cached (``resumed``: done before the run was
        resumed), ``remaining`` those neither done nor failed.
        """
        data: dict[str, str] = self.client.hgetall(self.key)  # type: ignore[assignment]
        plan = json.loads(data["plan"])
        zooms = []
        for entry in plan["zooms"]:
            if not entry["tiled"]:
                continue
            z = entry["zoom"]
            counts = {n: int(data.get(f"z:{z}:{n}", 0)) for n in (*_COUNTS, "resumed", "errors")}
            zooms.append({"zoom": z, "tiles": entry["tiles"], **counts})
        workers: dict[str, dict[str, int]] = {}
        for field, value in data.items():
            if field.startswith("worker:"):
                name, count = field[len("worker:") :].rsplit(":", 1)
                workers.setdefault(name, {"chunks": 0, "rendered": 0})[count] = int(value)
        totals = {n: sum(z[n] for z in zooms) for n in (*_COUNTS, "resumed")}
        done = totals["rendered"] + totals["skipped"] + totals["resumed"]
        until = float(data["ended"]) if "ended" in data else time.time()
        seconds = round(until - float(data["started"]), 3)
        made = done - totals["resumed"]  # this run's tiles: its rate
        rate = made / seconds if seconds > 0 else 0.0
        remaining = max(plan["total"] - done - totals["failed"], 0)
        return {
            "plan": plan,
            "zooms": zooms,
            "workers": dict(sorted(workers.items())),
            **totals,
            "done": done,
            "remaining": remaining,
            "tiles_per_s": round(rate, 1),
            "eta_s": round(remaining / rate) if rate > 0 else None,
            "seconds": seconds,
            "first_error": data.get("first_error"),
            "resumed_of": data.get("resumed_of"),
        }

    def progress_line(self, z: int) -> tuple[str, float]:
        """The line after a chunk of zoom ``z``: done/total, tiles per second, ETA; progress."""
        s = self.summary()
        zoom = next(item for item in s["zooms"] if item["zoom"] == z)
        zoom_done = zoom["rendered"] + zoom["skipped"] + zoom["resumed"]
        total = s["plan"]["total"]
        text = (
            f"Zoom {z}: {zoom_done}/{zoom['tiles']} tiles, {s['tiles_per_s']:.1f} tiles/s,"
            f" ETA {s['eta_s'] or 0:.0f}s"
        )
        return text, ((s["done"] + s["failed"]) / total if total else 1.0)


def _member(chunk: Chunk) -> str:
    """A chunk's name in the run's set of counted chunks."""
    return f"{chunk.z}:{chunk.x0}:{chunk.y0}"


# KEYS: the lock. ARGV: the holder expected, the new holder ('' to release), the TTL.
# Returns 1 when the lock was held by the holder expected (and is now changed).
_SWAP_HOLDER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1])
else redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3]) end
return 1
"""

#: seconds a lock may name a job whose record is not written yet (it is being enqueued)
_ENQUEUE_GRACE_S = 30


class LayerLock:
    """At most one run of a kind (``pretile``, ``export``) per layer: a Redis key naming the
    job that holds it.

    The task that ends a run releases the lock, and so does the cancel of a run (at once: its
    chunks still queued only count themselves cancelled, see :func:`free_run`); only the job
    the key names releases it. A lock whose job has ended anyway (a watchdog, a failure the API
    wrote) or whose record expired does not block the next run, and the key expires by itself
    (the run refreshes it as it goes).
    """

    def __init__(self, store: JobStore, style: str, ttl_s: int, kind: str = "pretile") -> None:
        self.store = store
        self.layer = style
        self.key = f"mapsvc:{kind}-lock:{style}"
        self._last = f"mapsvc:{kind}-last:{style}"
        self.ttl_s = ttl_s
        self._swap = store.client.register_script(_SWAP_HOLDER)

    def acquire(self, job_id: str) -> str | None:
        """Take the lock for ``job_id`` (about to be enqueued, or starting).

        Returns:
            None when the lock is now the job's; else the id of the job running the layer
            (``job_id`` itself when it holds the lock already).
        """
        while True:
            if self.store.client.set(self.key, job_id, nx=True, ex=self.ttl_s):
                return None
            holder = cast(str | None, self.store.client.get(self.key))
            if holder is None:
                continue  # released meanwhile
            if self._running(holder):
                return holder
            if self._swap(keys=[self.key], args=[holder, job_id, self.ttl_s]):
                return None

    def take_over(self, old: str, job_id: str) -> str | None:
        """Give ``old``'s lock to ``job_id`` (the job resuming it), in one step; when ``old``
        does not hold it, take it as :meth:`acquire` does.

        Returns:
            None when the lock is now ``job_id``'s; else the id of the job running the layer.
        """
        if self._swap(keys=[self.key], args=[old, job_id, self.ttl_s]):
            return None
        return self.acquire(job_id)

    def _running(self, holder: str) -> bool:
        record = self.store.get(holder)
        if record is None:
            age = self.ttl_s - self.store.client.ttl(self.key)
            return age < _ENQUEUE_GRACE_S
        return record.outcome is None

    def remember(self, job_id: str) -> None:
        """Name ``job_id`` the layer's last run (the one a resume continues)."""
        self.store.client.set(self._last, job_id, ex=self.store.ttl_s)

    def last(self) -> str | None:
        """The layer's last run, while its record is kept."""
        return cast(str | None, self.store.client.get(self._last))

    def refresh(self, job_id: str) -> None:
        """Keep the lock of a run that is still going (only while the job holds it)."""
        self._swap(keys=[self.key], args=[job_id, job_id, self.ttl_s])

    def release(self, job_id: str) -> None:
        """Free the layer, if ``job_id`` still holds it."""
        self._swap(keys=[self.key], args=[job_id, "", self.ttl_s])


# KEYS: the set of runs going (scores: when each lapses). ARGV: the job, now, its lapse, the most
# runs. Drops the lapsed; returns 1 when the job has (or now takes) a place.
_TAKE_SLOT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[4]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return 1
end
return 0
"""


class RunSlots:
    """At most ``most`` pre-tiling runs at a time, whatever their layers
    (``MAPSVC_SEED_MAX_CONCURRENT_RUNS``; 0: no limit): a sorted set of the runs going.

    A run takes a place before it sends its first chunk and keeps it while it sends (each step
    renews it); the end of the run frees it. A place whose job has ended anyway (a watchdog, a
    failure) is freed by the next run that waits, and one not renewed lapses by itself.
    """

    KEY = "mapsvc:pretile-runs"

    def __init__(self, store: JobStore, most: int, ttl_s: int) -> None:
        self.store = store
        self.most = most
        self.ttl_s = ttl_s
        self._take = store.client.register_script(_TAKE_SLOT)

    def take(self, job_id: str) -> bool:
        """Take (or renew) the job's place; False when every place is taken by a running job."""
        if self.most <= 0:
            return True
        if self._try(job_id):
            return True
        for holder in cast(list[str], self.store.client.zrange(self.KEY, 0, -1)):
            record = self.store.get(holder)
            if record is None or record.outcome is not None:
                self.store.client.zrem(self.KEY, holder)
        return self._try(job_id)

    def _try(self, job_id: str) -> bool:
        now = time.time()
        return bool(self._take(keys=[self.KEY], args=[job_id, now, now + self.ttl_s, self.most]))

    def going(self) -> int:
        """The runs holding a place."""
        return int(self.store.client.zcard(self.KEY))

    def free(self, job_id: str) -> None:
        """Free the job's place."""
        self.store.client.zrem(self.KEY, job_id)


#: seconds a running run must have been silent (no line, no step) before another job may
#: resume it: its workers are gone (a run's chunks each write a line, well under a second apart)
RESUME_SILENT_S = 30.0


def resumable(store: JobStore, run: str, lock_ttl_s: int, now: float) -> JobRecord:
    """Run ``run`` (a pre-tiling job's id), when a new job may continue it.

    It must be its layer's last run. A run that succeeded with failed tiles may be resumed (the
    new job makes them); so may one that ended without succeeding (failed, cancelled, ended by
    the watchdog) while its progress is kept (the events' TTL); so may a run still ``running``
    but silent for :data:`RESUME_SILENT_S` (its workers were killed, say); a paced run's steps
    come further apart, so its silence must be three of them.

    Raises:
        NotFoundError: no pre-tiling run of that id.
        UnprocessableError: its progress expired.
        ConflictError: it is not its layer's last run, it succeeded, or it is going.
    """
    record = store.get(run)
    if record is None or record.kind != PRETILE.kind:
        raise NotFoundError(f"no seeding run {run}")
    message = PRETILE.read(record.params)
    style = message.style
    unprocessable = UnprocessableError(
        f"the progress of run {run} expired: start a new run of layer {style}"
    )
    if record.outcome is None:  # going, or its workers gone: before its progress is looked
        # at, which a run that has only just started has not written yet
        rate = message.max_tiles_per_s
        quiet = max(RESUME_SILENT_S, 3 * CHUNK * CHUNK / rate) if rate else RESUME_SILENT_S
        silent = now - (record.heartbeat or record.created)
        if silent < quiet:
            raise ConflictError(
                f"layer {style} is being pre-tiled by job {record.id} (its last line"
                f" {silent:.0f} s ago): cancel it, or resume it once it has been silent for"
                f" {quiet:.0f} s",
                job_id=record.id,
            )
    # (a run is named the layer's last as it starts: one never started is none)
    last = LayerLock(store, style, lock_ttl_s).last()
    if last not in (None, record.id):
        raise ConflictError(
            f"run {run} is not the last of layer {style}: resume {last}", job_id=last
        )
    if not PretileCounters(store.client, record.id, store.ttl_s).exists():
        raise unprocessable
    if record.outcome == "succeeded" and not (record.result or {}).get("failed"):
        raise ConflictError(
            f"run {record.id} of layer {style} succeeded: nothing to resume",
            job_id=record.id,
        )
    return record


def supersede(store: JobStore, old: JobRecord, new_id: str) -> None:
    """End a run that a new job resumes (when it is still ``running``: its workers are gone)."""
    if old.outcome is None:
        message = f"the run was interrupted; job {new_id} resumes it"
        store.finish(old.id, "failed", f"{FINISH_ERROR}: {message}", UnavailableError(message))


def free_run(store: JobStore, record: JobRecord) -> None:
    """Free the layer and the place a pre-tiling job holds, as it is cancelled (queued: no step
    of it runs to free them; running: its chunks still queued only count themselves cancelled
    before the last ends the job); another kind holds neither.

    Only what the job still holds is freed (compare-and-delete on its id): a new run that took
    the layer meanwhile keeps it. A start of the job that takes the lock after this sees the
    cancel and gives it back (``PretileRunner.start``).
    """
    if record.kind != PRETILE.kind:
        return
    LayerLock(store, PRETILE.read(record.params).style, 0).release(record.id)
    RunSlots(store, 0, 0).free(record.id)
