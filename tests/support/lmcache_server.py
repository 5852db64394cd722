"""A stand-in LMCache memory API (aiohttp, loopback) with the ascend_ext wire format.

It keeps a tiny tier model (hash -> tiers), records every request, and fails on command:
``await fake.set_failure("500" | "503" | "malformed" | "slow", times=N, delay=S)``,
``await fake.refuse()`` / ``await fake.accept()`` (port closed / open again).
The same controls over HTTP: POST /_fake/fail {"mode", "times", "delay"}, POST /_fake/reset,
GET /_fake/requests, POST /_fake/put {"chunk_hashes", "tiers"}.
Prefetches load at once unless ``hold_prefetches`` is set: they then wait, as behind a busy
worker, until ``release_prefetches()``, and ``POST /memory/prefetch/cancel`` stops them as
ascend_ext's does (``cancels = False``: the route is missing, as on a stock memory API).
``POST /memory/order`` answers as ascend_ext's (``{status, moved, missing}``: copies moved,
chunks held nowhere) and keeps each tier's order hints (``cold``: hinted cold, oldest
first); ``orders = False``: the route is missing (404), as on a stock memory API.
Run alone: ``python tests/support/lmcache_server.py --port 6999``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ascend_ext.deferred_evict import (
    DeferredEvictions,
    parse_defer,
    parse_generation,
    parse_not_after,
)
from ascend_ext.memory_ops import parse_cancel_id, parse_hashes, parse_locations, parse_lookup_id
from ascend_ext.order_hint import parse_position
from ascend_ext.request_error import RequestError

CPU, DISK = "LocalCPUBackend", "LocalDiskBackend"
MODES = ("500", "503", "malformed", "slow")


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    body: Any
    raw: str
    at: float = field(default_factory=time.monotonic)


class FakeLMCacheServer:
    """A real HTTP server on 127.0.0.1 speaking the memory-API wire format."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Not started yet; port 0 picks a free one at start()."""
        self.host, self.port = host, port
        self.requests: list[Recorded] = []
        self.tiers: dict[str, list[str]] = {}
        self.mode: str | None = None
        self.times: int | None = None
        self.delay = 0.0
        self._held = asyncio.Event()  # set to release the calls a "slow" failure holds
        self._arrived = asyncio.Event()  # set as each memory call is received
        # Off: a stock memory API (acts at once, no /memory/keep). On: ascend_ext's deferred
        # deletes and keeps; pending deletes run when ``fire_deferred()`` is called (tests
        # decide when the deferral ends, so nothing depends on timing).
        self.defers = False
        self.deferred = DeferredEvictions()
        # Called as each delete is carried out, with the hashes removed: a test checks the
        # daemon's state at that very moment (the recording backend's invariant probe).
        self.on_delete: Any = None
        # Run alone (--defer), pending deletes also fire on their own when due, as in
        # ascend_ext; in-process tests leave this off and call fire_deferred().
        self.timers = False
        # While set, keep calls are held (received and recorded, not processed) until it
        # is released: a keep slower than the deferral, or one that never gets through.
        self.keep_hold: asyncio.Event | None = None
        self.keep_delay = 0.0  # every keep answered this late (--keep-delay)
        self.violations: list[dict[str, Any]] = []
        self.deleted = 0
        # ascend_ext's prefetch cancel route; off: 404, as a stock memory API.
        self.cancels = True
        # While set, prefetches are queued (lookup_id -> [hashes] per call), not loaded,
        # until release_prefetches(): a cancel in between stops them.
        self.hold_prefetches = False
        self.held: dict[str, list[list[str]]] = {}
        self.cancelled: dict[str, int] = {}  # lookup_id -> chunks a cancel stopped
        # ascend_ext's order route; off: 404, as a stock memory API. ``cold``: the chunks
        # hinted cold and not warmed since, oldest hint first (what its LRU evicts first).
        self.orders = True
        self.cold: dict[str, None] = {}
        # hash -> what the cache saw of it, oldest first (evicts, keeps, deletes carried
        # out): a violation names its chunk's history. Only kept with ``record_history``.
        self.record_history = False
        self.history: dict[str, list[list[Any]]] = {}
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:40123."""
        return f"http://{self.host}:{self.port}"

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> str:
        """Bind and serve; returns the base URL."""
        if self.port == 0:
            self.port = _free_port(self.host)
        app = web.Application()
        app.router.add_post("/memory/prefetch/cancel", self._memory)
        app.router.add_post("/memory/{op}", self._memory)
        app.router.add_post("/_fake/fail", self._ctl_fail)
        app.router.add_post("/_fake/reset", self._ctl_reset)
        app.router.add_post("/_fake/put", self._ctl_put)
        app.router.add_get("/_fake/requests", self._ctl_requests)
        app.router.add_get("/_fake/state", self._ctl_state)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await self.accept()
        return self.url

    async def stop(self) -> None:
        """Close the port and the app."""
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = self._site = None

    async def refuse(self) -> None:
        """Close the listening port and drop open connections, as a cache that went down
        does: clients get connection refused (a kept-alive connection does not live on)."""
        if self._site is not None:
            await self._site.stop()
            self._site = None
        server = self._runner.server if self._runner is not None else None
        for conn in list(server.connections if server is not None else []):
            conn.force_close()

    async def accept(self) -> None:
        """Listen again on the same port."""
        if self._site is None and self._runner is not None:
            self._site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
            await self._site.start()

    async def __aenter__(self) -> FakeLMCacheServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- controls ----------------------------------------------------------------------------
    async def set_failure(
        self, mode: str | None, times: int | None = None, delay: float = 0.0
    ) -> None:
        """Fail the next ``times`` memory calls (None: until healed) in ``mode``.

        ``slow`` holds each call ``delay`` seconds, or until the next ``set_failure`` or
        ``heal`` (``delay=math.inf``: until then, whatever the clock says), then answers it.
        """
        if mode is not None and mode not in MODES:
            raise ValueError(f"mode must be one of {MODES} or None")
        self._release_held()
        self.mode, self.times, self.delay = mode, times, delay

    def _release_held(self) -> None:
        self._held.set()
        self._held = asyncio.Event()

    async def _hold(self) -> None:
        """A slow call: ``delay`` seconds, or until the failure is changed or healed."""
        held = self._held
        if self.delay == float("inf"):
            await held.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(held.wait(), self.delay)

    async def heal(self) -> None:
        """Answer normally again (and accept connections)."""
        await self.set_failure(None)
        await self.accept()

    def put(self, hashes: list[str], tiers: tuple[str, ...] = (CPU, DISK)) -> None:
        """Seed chunks as if the engine had stored them."""
        for h in hashes:
            self.tiers[h] = list(tiers)

    def calls(self, op: str) -> list[Any]:
        """Bodies of the memory calls received for op (prefetch, evict, keep, query, cancel)."""
        path = "/memory/prefetch/cancel" if op == "cancel" else f"/memory/{op}"
        return [r.body for r in self.requests if r.path == path]

    async def until(self, check: Callable[[], object]) -> None:
        """Wait until ``check()`` is true, checking again as each memory call arrives
        (recorded before any failure mode holds it)."""
        while not check():
            self._arrived.clear()
            await self._arrived.wait()

    def release_prefetches(self) -> int:
        """Load every held prefetch now (in arrival order); returns chunks loaded."""
        held, self.held = self.held, {}
        return sum(self._load(hashes) for calls in held.values() for hashes in calls)

    def _load(self, hashes: list[str]) -> int:
        """A prefetch's load: chunks on disk only come up to DDR too (and warm)."""
        n = 0
        for h in hashes:
            self.cold.pop(h, None)
            tiers = self.tiers.get(h, [])
            if DISK in tiers and CPU not in tiers:
                tiers.insert(0, CPU)
                n += 1
        return n

    def _cancel(self, body: dict) -> web.Response:
        """Stop the held prefetches of a lookup_id (ended or unknown: 0, 0)."""
        lookup_id = parse_cancel_id(body)
        stopped = self.held.pop(lookup_id, [])
        skipped = sum(len(hashes) for hashes in stopped)
        if stopped:
            self.cancelled[lookup_id] = self.cancelled.get(lookup_id, 0) + skipped
        return web.json_response(
            {
                "status": "success",
                "lookup_id": lookup_id,
                "cancelled": len(stopped),
                "skipped": skipped,
            }
        )

    # -- memory API --------------------------------------------------------------------------
    async def _memory(self, request: web.Request) -> web.Response:
        """POST /memory/{prefetch,evict,keep,query} and /memory/prefetch/cancel, same
        validation and answers as ascend_ext."""
        raw = await request.text()
        try:
            body: Any = json.loads(raw or "null")
        except ValueError:
            body = None
        op = request.match_info.get("op", "cancel")
        self.requests.append(Recorded(request.method, request.path, body, raw))
        self._arrived.set()
        failing = self._take_failure()
        if failing == "slow":
            await self._hold()
        elif failing == "503":
            return _err(503, "no LMCache engine in this process and it is not the scheduler")
        elif failing == "500":
            return web.json_response(
                {
                    "error": "1 of 2 workers failed",
                    "failed_workers": {"http://127.0.0.1:7001": "ConnectError: refused"},
                    "partial": {},
                },
                status=500,
            )
        elif failing == "malformed":
            return web.Response(text="{not json", content_type="application/json")
        known = ("prefetch", "evict", "query", "keep", "cancel", "order")
        if (
            op not in known
            or (op == "keep" and not self.defers)
            or (op == "cancel" and not self.cancels)
            or (op == "order" and not self.orders)
        ):
            return _err(404, f"no route {request.path}")
        if not isinstance(body, dict):
            return _err(400, "body must be a JSON object")
        try:
            if op == "cancel":
                return self._cancel(body)
            hashes = parse_hashes(body)
            if op == "order":
                return self._order(hashes, parse_position(body), parse_locations(body))
            if op == "prefetch":
                lookup_id = parse_lookup_id(body)
                if self.hold_prefetches:
                    self.held.setdefault(lookup_id, []).append(list(hashes))
                else:
                    self._load(list(hashes))
                return web.json_response(
                    {
                        "status": "prefetch_started",
                        "lookup_id": lookup_id,
                        "num_chunks": len(hashes),
                    }
                )
            if op == "keep":
                generation = parse_generation(body)
                if generation is None:
                    raise RequestError("missing required field 'generation'")
                if self.keep_hold is not None:
                    await self.keep_hold.wait()
                if self.keep_delay:
                    await asyncio.sleep(self.keep_delay)
                cancelled, late = self.deferred.keep(hashes, generation)
                for h in hashes:  # ascend_ext's keep warms what it kept
                    self.cold.pop(h, None)
                if self.record_history:
                    gone = set(late)
                    for h in hashes:
                        self._note(h, "keep", generation, "late" if h in gone else "")
                return web.json_response(
                    {"status": "success", "cancelled": cancelled, "late": late, "expires": True}
                )
            if op == "evict":
                locations = parse_locations(body)
                if self.defers:
                    delay = parse_defer(body)
                    generation = parse_generation(body)
                    added = self.deferred.add(
                        hashes, locations, generation, delay, parse_not_after(body)
                    )
                    if self.record_history:
                        refused = {h: "stale" for h in added.stale}
                        refused.update((h, "expired") for h in added.expired)
                        for h in hashes:
                            self._note(h, "evict", generation, refused.get(h, f"defer {delay:g}"))
                    if added.deferred and self.timers:
                        asyncio.get_running_loop().call_later(delay + 0.001, self._fire_due)
                    return web.json_response(
                        {
                            "status": "success",
                            "num_evicted": self._evict_claimed(added.now, locations),
                            "deferred": added.deferred,
                            "stale": added.stale,
                            "expired": added.expired,
                            "expires": True,
                        }
                    )
                return web.json_response(
                    {"status": "success", "num_evicted": self._evict(hashes, locations)}
                )
            return web.json_response({h: list(self.tiers.get(h, [])) for h in hashes})
        except RequestError as exc:
            return _err(400, str(exc))

    def _order(self, hashes: list[str], position: str, locations: list[str] | None) -> web.Response:
        """ascend_ext's order: each copy in the tiers asked moves (nothing is removed);
        ``missing`` counts the chunks held in none of them."""
        moved = missing = 0
        for h in dict.fromkeys(hashes):
            held = [t for t in self.tiers.get(h, []) if locations is None or t in locations]
            moved += len(held)
            missing += not held
            self.cold.pop(h, None)
            if position == "cold" and held:
                self.cold[h] = None
        return web.json_response({"status": "success", "moved": moved, "missing": missing})

    def _note(self, h: str, op: str, generation: int | None, detail: str) -> None:
        self.history.setdefault(h, []).append([round(time.time(), 3), op, generation, detail])

    def _take_failure(self) -> str | None:
        """The failure mode for this call, counting down ``times``."""
        if self.mode is None:
            return None
        mode = self.mode
        if self.times is not None:
            self.times -= 1
            if self.times <= 0:
                self.mode, self.times = None, None
        return mode

    def _fire_due(self) -> None:
        for locations, hashes in self.deferred.due():
            self._evict_claimed(hashes, locations)

    def fire_deferred(self) -> int:
        """End every pending deferral now: carry out the deletes no keep cancelled (and
        whose deadline has not passed: those are dropped, as ascend_ext does)."""
        inf = float("inf")
        return sum(
            self._evict_claimed(hashes, locations, inf)
            for locations, hashes in self.deferred.due(inf)
        )

    def _evict_claimed(
        self, hashes: list[str], locations: list[str] | None, now: float | None = None
    ) -> int:
        """Claim (the last check, as ascend_ext's worker does), remove, finish."""
        claimed = self.deferred.claim(hashes, now)
        try:
            return self._evict(claimed, locations) if claimed else 0
        finally:
            self.deferred.finish(claimed)

    def _evict(self, hashes: list[str], locations: list[str] | None) -> int:
        """Remove copies; the count is copies removed, like StorageManager.batched_remove."""
        if self.record_history:
            for h in hashes:
                self._note(h, "delete", self.deferred.removing.get(h), "")
        if self.on_delete is not None and hashes:
            self.on_delete(list(hashes))
        n = 0
        for h in hashes:
            tiers = self.tiers.get(h, [])
            for t in list(tiers):
                if locations is None or t in locations:
                    tiers.remove(t)
                    n += 1
            if not tiers:
                self.tiers.pop(h, None)
                self.cold.pop(h, None)
        return n

    async def _ctl_fail(self, request: web.Request) -> web.Response:
        """POST /_fake/fail {"mode", "times"?, "delay"?}."""
        body = await request.json()
        try:
            await self.set_failure(body.get("mode"), body.get("times"), body.get("delay", 0.0))
        except ValueError as exc:
            return _err(400, str(exc))
        return web.json_response({"ok": True})

    async def _ctl_reset(self, request: web.Request) -> web.Response:
        """POST /_fake/reset: heal, forget requests and chunks."""
        await self.set_failure(None)
        self.requests.clear()
        self.tiers.clear()
        self.held.clear()
        self.cancelled.clear()
        self.cold.clear()
        return web.json_response({"ok": True})

    async def _ctl_put(self, request: web.Request) -> web.Response:
        """POST /_fake/put {"chunk_hashes", "tiers"?}."""
        body = await request.json()
        self.put(body["chunk_hashes"], tuple(body.get("tiers", (CPU, DISK))))
        return web.json_response({"ok": True})

    async def _ctl_requests(self, request: web.Request) -> web.Response:
        """GET /_fake/requests: what was received, oldest first."""
        return web.json_response(
            [{"method": r.method, "path": r.path, "body": r.body} for r in self.requests]
        )

    async def _ctl_state(self, request: web.Request) -> web.Response:
        """GET /_fake/state: pending deferred deletes, deletes carried out, probe findings."""
        return web.json_response(
            {
                "pending": sorted(self.deferred.pending),
                "violations": self.violations,
                "deleted": self.deleted,
                "expired": self.deferred.expired,
            }
        )


def store_probe(fake: FakeLMCacheServer, store: str) -> Any:
    """A delete-time probe: every hash deleted while the daemon's SQLite file (committed
    state, read at that very moment) says a live map or fork hold references it."""
    import sqlite3

    def probe(hashes: list[str]) -> None:
        fake.deleted += len(hashes)
        try:
            con = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=10)
            try:
                rows = con.execute(
                    "SELECT s.session_id, s.map_json, st.suspended, s.turn_count, "
                    "st.last_event_ts FROM sessions s "
                    "LEFT JOIN session_state st ON st.session_id = s.session_id"
                ).fetchall()
                holds = con.execute(
                    "SELECT fork_id, session_id, hashes_json, created_ts FROM forks"
                ).fetchall()
            finally:
                con.close()
        except sqlite3.Error as exc:
            fake.violations.append({"error": str(exc)})
            return
        held: dict[str, list[str]] = {}
        # Each holder with when it was written (turn, last event / fork taken, wall clock):
        # a hold older than the daemon's last start was in the file it loaded.
        for sid, map_json, suspended, turns, ts in rows:
            if not suspended:
                for h in json.loads(map_json):
                    held.setdefault(h, []).append(f"map {sid} turn {turns} at {ts or 0:.3f}")
        for fid, sid, hold, ts in holds:  # open forks, their parent closed or not
            for h in json.loads(hold):
                held.setdefault(h, []).append(f"fork {fid} of {sid} at {ts:.3f}")
        fake.violations.extend(
            {
                "hash": h,
                "at": time.time(),
                "held_by": sorted(set(held[h])),
                "history": fake.history.get(h, [])[-12:],
            }
            for h in hashes
            if h in held
        )

    return probe


def _err(status: int, message: str) -> web.Response:
    """The memory API's error shape."""
    return web.json_response({"error": message}, status=status)


def _free_port(host: str) -> int:
    """A free TCP port on host (tiny race window; fine for tests)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def main() -> None:
    """Serve until interrupted."""
    p = argparse.ArgumentParser(description="fake LMCache memory API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=6999)
    p.add_argument(
        "--defer",
        action="store_true",
        help="defer deletes as ascend_ext does (defer_s, generations, /memory/keep)",
    )
    p.add_argument(
        "--keep-delay",
        type=float,
        default=0.0,
        help="answer every keep this many seconds late (a slow cache)",
    )
    p.add_argument(
        "--probe-store",
        default="",
        help="check this daemon store at every delete (GET /_fake/state)",
    )
    args = p.parse_args()

    async def run() -> None:
        fake = FakeLMCacheServer(args.host, args.port)
        fake.defers = fake.timers = args.defer
        fake.keep_delay = args.keep_delay
        if args.probe_store:
            fake.record_history = True
            fake.on_delete = store_probe(fake, args.probe_store)
        print(f"fake lmcache memory API on {await fake.start()}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
