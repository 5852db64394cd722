"""Orchestration: validate -> core -> persist -> backend -> publish trace."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from ramakv_daemon.adapters.backends.factory import lmcache_factory
from ramakv_daemon.committer import GroupCommitter
from ramakv_daemon.config import Config
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent, RamAKvError
from ramakv_daemon.core.events import Limits, check_required
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.session import Session
from ramakv_daemon.debug_files import wants_debug_file, write_debug_file
from ramakv_daemon.evict_window import report_window
from ramakv_daemon.handlers import DEFAULT_REGISTRY, Registry
from ramakv_daemon.idempotency import (
    AnswerCache,
    AnswerSlot,
    TooDeep,
    keep_final,
    request_digest,
    reused,
)
from ramakv_daemon.log_text import loggable, utf8
from ramakv_daemon.metrics import DaemonMetrics
from ramakv_daemon.namespaces import BackendFactory, Namespace, Namespaces
from ramakv_daemon.ownership import Ownership
from ramakv_daemon.ports import Backend, SessionStore, StoreError
from ramakv_daemon.reads import READ_EVENTS, Result, finish_read, first_step, read_committed
from ramakv_daemon.shared_counts import SharedCounts
from ramakv_daemon.trace import TraceHub, cut
from ramakv_daemon.trace_protocol import summary
from ramakv_daemon.trace_snapshot import totals
from ramakv_protocol.records import SessionSummary

log = logging.getLogger("ramakv")


class EventService:
    """Handles one event end to end and keeps the daemon's moving parts together."""

    def __init__(
        self,
        config: Config,
        store: SessionStore,
        backend: Backend,
        registry: Registry = DEFAULT_REGISTRY,
        backend_factory: BackendFactory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``backend`` steers the unnamed default namespace and every deployment without
        its own lmcache_url; ``backend_factory(url, evict_locations)`` builds the others.
        ``clock`` is the wall clock events and fork expiry read (tests inject one)."""
        self.config = config
        self.clock = clock
        self.store = store
        self.backend = backend
        self.registry = registry
        self.limits = Limits(config.max_hashes_per_event, config.max_hash_bytes)
        self.metrics = DaemonMetrics({s.name for s in registry.specs()})
        self.trace = TraceHub(config.trace_buffer, config.trace_queue, config.trace_buffer_bytes)
        self.trace.on_drop = self.metrics.dropped_subscribers.inc
        self.namespaces = Namespaces(
            config,
            registry,
            self.limits,
            lambda: self.committer,
            backend,
            backend_factory or lmcache_factory(config),
            self.metrics.backend,
            self._backend_failed,
            lambda *report: report_window(self.metrics, self.trace.publish, *report),
        )
        self.committer = GroupCommitter(
            store,
            self.namespaces.managers,
            self.metrics.commit,
            config.idempotency_ttl_s,
            self._evictions_committed,
            self._committed,
            self._rolled_back,
        )
        self.namespaces.setup()
        default = self.namespaces[self.namespaces.default]
        # The default namespace's parts under their pre-namespace names (tests, admin).
        self.manager: SessionManager = default.manager
        self.ctx = default.ctx
        self.dispatcher = default.dispatcher
        self.answers = AnswerCache(config.idempotency_window)
        self.ownership = Ownership(store, self.namespaces, self._handle)
        self._budget_warned: dict[str, float] = {}
        self._expiry_task: asyncio.Task[None] | None = None
        self.shared = SharedCounts()
        self._warm_task: asyncio.Task[int] | None = None

    # ---- life cycle ------------------------------------------------------------------
    async def start(self) -> None:
        """Open the store, restore every session, start the writer."""
        t0 = time.perf_counter()
        await self.store.open()
        try:
            await self._restore(t0)
        except BaseException:
            # A corrupt page found while loading: close the store (and its worker
            # threads) so the process can exit and a supervisor sees it fail.
            await self.store.close()
            raise

    async def _restore(self, t0: float) -> None:
        groups: dict[str, list[Session]] = {key: [] for key in self.namespaces.managers}
        for s in await self.store.load_all():
            groups.setdefault(s.namespace, []).append(s)
        forks, next_fork_id = await self.store.load_forks()
        fork_groups: dict[str, list[Fork]] = {}
        for f in forks:
            fork_groups.setdefault(f.namespace, []).append(f)
            groups.setdefault(f.namespace, [])
        self.namespaces.fork_ids.seen(next_fork_id - 1)
        for key, group in groups.items():
            self.namespaces.add(key).manager.load(group, fork_groups.get(key, ()))
        for row_id, key, entries in await self.store.load_outbox():
            self.committer.next_row_id = max(self.committer.next_row_id, row_id + 1)
            self.namespaces.add(key).dispatcher.load(row_id, entries)
        for event_id, body, *digest in await self.store.load_event_ids(
            self.config.idempotency_window
        ):
            self.answers.remember(event_id, json.loads(body), digest[0] if digest else "")
        managers = self.namespaces.managers.values()
        log.info(
            "ram-a-kv restored %d sessions, %d open forks, %d chunks, %d references in %d "
            "namespaces in %.3fs from %s",
            sum(len(m.sessions) for m in managers),
            sum(len(m.forks) for m in managers),
            sum(len(m.refcounts) for m in managers),
            sum(m.refcounts.total_references() for m in managers),
            len(managers),
            time.perf_counter() - t0,
            self.config.store_shown,
        )
        self.committer.start()
        for ns in self.namespaces:
            if ns.dispatcher.backlog:
                log.info(
                    "ram-a-kv %d evictions of namespace %r from the outbox %s",
                    ns.dispatcher.backlog,
                    ns.key,
                    "will be retried"
                    if ns.delivers
                    else "are kept (namespace not configured: nothing is sent)",
                )
            if ns.delivers:
                ns.dispatcher.start()
        # Every stored session's shared_count, in the background: snapshots then need
        # no refcount lookups (seconds of them at 50,000 sessions x 512 chunks).
        self._warm_task = asyncio.get_running_loop().create_task(
            self.shared.warm(self.namespaces.managers), name="shared-counts"
        )
        if self.config.fork_hold_ttl_s > 0:
            await self.expire_forks()  # holds that expired while the daemon was down
            self._expiry_task = asyncio.get_running_loop().create_task(
                self._expire_forks_forever(), name="fork-expiry"
            )

    async def stop(self) -> None:
        """Close subscribers, flush commits and backend calls, close the store."""
        if self._warm_task is not None and not self._warm_task.done():
            self._warm_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warm_task
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry_task
        self.trace.close_all("daemon shutting down")
        for ns in self.namespaces:
            await ns.dispatcher.close()
        for ns in self.namespaces:
            if ns.delivers:
                await ns.dispatcher.drain()
        await self.ownership.close()
        await self.committer.close()
        await self.store.close()
        await self.backend.close()
        for ns in self.namespaces:
            if ns.own_backend is not None:
                await ns.own_backend.close()

    # ---- events ----------------------------------------------------------------------
    async def handle(self, payload: Any) -> tuple[int, dict[str, Any]]:
        """Handle one decoded JSON body; returns (HTTP status, response envelope).

        An ``event_id`` makes the event idempotent: a retry gets the first answer back
        (remembered durably with the change, for ``idempotency_window`` ids).
        """
        if not isinstance(payload, dict):
            return 400, {"ok": False, "error": "request body must be a JSON object"}
        if "event_id" not in payload:
            return await self._handle(payload, None)
        return await self._idempotent(payload)

    async def _idempotent(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """An event with an ``event_id``: the first answer, or apply it and keep its answer."""
        event_id = payload["event_id"]
        if not isinstance(event_id, str) or not 0 < len(event_id) <= 200 or not utf8(event_id):
            return 200, {
                "ok": False,
                "type": payload.get("type"),
                "error": "event_id must be a non-empty string of at most 200 characters "
                "(valid Unicode)",
            }
        try:
            digest = request_digest(payload)
        except TooDeep as err:
            return 200, {"ok": False, "type": payload.get("type"), "error": str(err)}
        known = self.answers.get(event_id)
        if known is not None:
            if not known.matches(digest):
                return 200, reused(event_id, payload.get("type"))
            return 200, known.body
        inflight = self.answers.inflight.get(event_id)
        if inflight is not None:
            if inflight[0] != digest:
                return 200, reused(event_id, payload.get("type"))
            return await asyncio.shield(inflight[1])
        fut: asyncio.Future[tuple[int, dict[str, Any]]] = asyncio.get_running_loop().create_future()
        self.answers.inflight[event_id] = (digest, fut)
        try:
            slot = AnswerSlot(event_id, digest)
            status, body = await self._handle(payload, slot)
            if status == 200 and body.get("ok"):
                status, body = await keep_final(self.committer, slot, body)
            if status == 200:
                self.answers.remember(event_id, body, digest)
            fut.set_result((status, body))
            return status, body
        finally:
            self.answers.inflight.pop(event_id, None)
            if not fut.done():
                fut.cancel()

    async def _handle(
        self, payload: dict[str, Any], slot: AnswerSlot | None
    ) -> tuple[int, dict[str, Any]]:
        started = time.perf_counter()
        type_ = payload.get("type")
        if not isinstance(type_, str) or not type_:
            log.warning("event rejected: missing or empty 'type' field")
            return 200, {"ok": False, "error": "missing or empty 'type' field"}
        sid = payload.get("session_id")
        session_id = sid if isinstance(sid, str) else None
        if log.isEnabledFor(logging.INFO):  # the arguments cost more than the check
            log.info(
                "ram-a-kv event received type=%s session_id=%s",
                loggable(type_),
                loggable(session_id or ""),
            )
        status = 200
        change: Change | None = None
        try:
            handler = self.registry.get(type_)
            check_required(handler.spec, payload)
            await self.ownership.before(type_, session_id)  # a shared store's takeover
            ns = self.namespaces[self.namespaces.resolve(payload)]
            if handler.query is not None:
                change = await handler.query(ns.ctx, payload, ns.dispatcher.backend)
                change.namespace = ns.key
            else:
                apply: Callable[..., Result] | None = handler.apply
                assert apply is not None  # a handler is a query or an apply
                fork_id = await self.ownership.fork_id(type_)  # a shared store's, else None
                if fork_id is not None:
                    apply = partial(apply, fork_id=fork_id)
                change = await self._apply(type_, apply, payload, ns)
                # The delta is taken now, before any await, so it is this event's alone.
                if "_delta" not in change.notes:
                    change.notes["_delta"] = self._delta(change)
                if change.durable or change.evict_delete or change.evict_demote:
                    change.notes["_event"] = (type_, session_id)
                    answer = None
                    if slot is not None:
                        slot.stored = json.dumps({"ok": True, "type": type_, "data": change.data})
                        answer = (slot.event_id, slot.stored, time.time(), slot.digest)
                    keep = ns.dispatcher.keep_for(change.prev_counts) if change.durable else None
                    if keep is not None:
                        change.notes["_kept"] = keep[1]
                    await self.committer.submit(change, answer, keep and keep[0])
        except StoreError as err:
            status, change, error = 503, None, str(err)
        except RamAKvError as err:
            change, error = None, str(err)
        except (ValueError, TypeError) as err:  # a handler's own check; never a crash
            change, error = None, str(InvalidEvent(str(err)))
        if change is None:
            return status, self._failed(type_, session_id, error, started)
        if type_ == "turn_end" and self.config.debug_enabled:
            await self._write_debug(session_id or "", change)
        return 200, self._succeeded(type_, session_id, change, started)

    async def _apply(
        self, type_: str, apply: Any, payload: dict[str, Any], ns: Namespace
    ) -> Change:
        """Apply a handler; a read or a refusal never answers from a change still in doubt.

        A read while changes wait for their commit answers the committed state
        (:func:`ramakv_daemon.reads.read_committed`). A write refused while changes are in
        doubt could be contradicted by their rollback: wait for them, then apply again
        (a refusal changed nothing, so applying again is safe).
        """
        busy = self.committer.busy
        if busy and type_ in READ_EVENTS:
            return await read_committed(
                type_,
                apply,
                payload,
                ns,
                self.namespaces.managers,
                self.committer,
                self._delta,
                self.clock(),
            )
        try:
            change = apply(ns.ctx, payload, self.clock())
        except RamAKvError:
            if not busy:
                raise
            await self.committer.barrier()
            change = apply(ns.ctx, payload, self.clock())
            change.namespace = ns.key
            return change
        if busy and not (change.durable or change.evict_delete or change.evict_demote):
            await self.committer.barrier()
            change = apply(ns.ctx, payload, self.clock())
        change = await finish_read(first_step(change))
        change.namespace = ns.key
        return change

    def _succeeded(
        self, type_: str, session_id: str | None, change: Change, started: float
    ) -> dict[str, Any]:
        c = change
        if c.notes.get("forced"):
            log.warning("chunk_evict force: released references %s", c.data.get("released"))
        ns = self.namespaces[c.namespace]
        prefetch = c.prefetch
        if ns.budget.budget and "_delta" in c.notes:
            prefetch = self._budget_after(type_, session_id, c, ns)
        ns.dispatcher.prefetch(session_id, prefetch)
        if not c.notes.get("_published"):
            self._publish(type_, session_id, True, c)
        if c.notes.get("_budget"):
            self.trace.publish(c.notes["_budget"])  # type: ignore[arg-type]
        elapsed = time.perf_counter() - started
        self.metrics.event(type_, True, elapsed)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "ram-a-kv event completed type=%s session_id=%s ms=%.2f",
                type_,
                loggable(session_id or ""),
                elapsed * 1000,
            )
        self._print_trace()
        return {"ok": True, "type": type_, "data": c.data}

    def _committed(self, change: Change) -> None:
        """A write is durable: its trace record goes out now, in apply order (replies
        resume later, in any order; reads answer from committed state, so none of them
        can be published carrying an older map than a write already published)."""
        event = change.notes.pop("_event", None)
        if isinstance(event, tuple):
            self._publish(event[0], event[1], True, change)
            change.notes["_published"] = True

    def _rolled_back(self, change: Change) -> None:
        kept = change.notes.get("_kept")
        if kept:
            self.namespaces[change.namespace].dispatcher.rolled_back(kept)  # type: ignore[arg-type]

    def _evictions_committed(self, change: Change, row: int) -> None:
        """A committed change's evictions, durable in outbox row ``row``: deliver them."""
        self.namespaces[change.namespace].dispatcher.evictions_committed(
            change.evict_delete, change.evict_demote, row
        )

    def _failed(
        self, type_: str, session_id: str | None, error: str, started: float
    ) -> dict[str, Any]:
        self.metrics.event(type_, False, time.perf_counter() - started)
        log.warning(
            "ram-a-kv event failed type=%s session_id=%s error=%s",
            loggable(type_),
            loggable(session_id or ""),
            loggable(error, 500),
        )
        # A rejected request's own strings are cut: they are the client's, of any size,
        # and the ring must not keep megabytes of them.
        self.trace.publish(
            {
                "kind": "event",
                "ts": time.time(),
                "type": cut(type_),
                "session_id": cut(session_id),
                "ok": False,
                "error": cut(error, 500),
                "delta": {"sessions": {}, "refcounts": {}},
            }
        )
        self._print_trace()
        return {"ok": False, "type": type_, "error": error}

    def _backend_failed(self, op: str, count: int, result: Any, backlog: int) -> None:
        self.trace.publish(
            {
                "kind": "backend",
                "ts": time.time(),
                "op": op,
                "count": count,
                "ok": False,
                "status": result.status,
                "detail": result.detail,
                "backlog": backlog,
            }
        )

    def _budget_after(
        self, type_: str, session_id: str | None, c: Change, ns: Namespace
    ) -> list[str]:
        """Track turns in flight, prefetch a demoted session back, demote over budget."""
        m, b, now = ns.manager, ns.budget, time.time()
        session = m.sessions.get(session_id) if session_id else None
        back = b.observe(type_, session_id, session is not None, now)
        prefetch = c.prefetch
        if back and not prefetch and session is not None and not session.suspended:
            prefetch = list(session.unique_hashes())
        if b.due(type_, len(m.refcounts), now):  # resident <= referenced: cheap test first
            holds = m.fork_holds_by_session() if len(m.forks) else None
            plan = b.plan_fast(m.sessions, m.refcounts.counts, now, holds)
            if plan.victims:
                b.apply(plan)
                ns.dispatcher.demote(plan.demote)
                self.metrics.budget(ns.label, len(plan.victims), len(plan.demote))
                if plan.over and now - self._budget_warned.get(ns.key, 0.0) >= 60.0:
                    # Once a minute per namespace: under sustained pressure every pass is over.
                    self._budget_warned[ns.key] = now
                    log.warning(
                        "namespace %r over its DDR budget (%d > %d chunks): the rest is in flight",
                        ns.key,
                        plan.usage_after,
                        plan.budget,
                    )
                c.notes["_budget"] = {
                    "kind": "budget",
                    "ts": now,
                    "namespace": ns.key,
                    "victims": plan.victims,
                    "demote": plan.demote,
                    "usage_before": plan.usage_before,
                    "usage_after": plan.usage_after,
                    "budget": plan.budget,
                }
        return prefetch

    def _delta(self, c: Change) -> dict[str, Any]:
        """What the event changed, as it stands now: session summaries (protocol 2 sends
        no maps) and the refcounts."""
        manager = self.namespaces.managers[c.namespace]
        counts = manager.refcounts.counts
        delta: dict[str, Any] = {
            "sessions": {sid: self._summary(manager, sid) for sid in c.prev_sessions},
            "refcounts": {h: counts.get(h, 0) for h in c.prev_counts},
        }
        if c.prev_forks:  # fork id -> its summary, or None once ended
            forks = manager.forks
            delta["forks"] = {
                str(fid): (f.summary() if (f := forks.get(fid)) is not None else None)
                for fid in c.prev_forks
            }
        return delta

    def _summary(self, manager: SessionManager, sid: str) -> SessionSummary | None:
        """A session's trace summary now (None when gone); its shared_count is kept for
        snapshots (see shared_counts)."""
        s = manager.sessions.get(sid)
        if s is None:
            self.shared.put(manager.namespace, sid, None)
            return None
        row = summary(s, manager.refcounts.counts, manager.forks.of(sid))
        self.shared.put(manager.namespace, sid, row["shared_count"])
        return row

    def _publish(self, type_: str, session_id: str | None, ok: bool, c: Change) -> None:
        delta = c.notes.get("_delta") or self._delta(c)
        record: dict[str, Any] = {
            "kind": "event",
            "ts": time.time(),
            "type": type_,
            "session_id": session_id,
            "ok": ok,
            "data": c.data,
            "delta": delta,
            "prefetch": c.prefetch,
            "evict": c.evict_delete,
            "demote": c.evict_demote,
            "totals": totals(self.namespaces.managers),
        }
        if c.namespace:
            record["namespace"] = c.namespace
        if "_touched" in c.notes:
            record["_touched"] = c.notes["_touched"]
        notes = {
            # Keys starting with "_" are the daemon's own bookkeeping, not facts for clients.
            k: v
            for k, v in c.notes.items()
            if k != "debug_context" and not k.startswith("_")
        }
        if notes:
            record["notes"] = notes
        self.trace.publish(record)

    async def _write_debug(self, session_id: str, change: Change) -> None:
        ctx = change.notes.get("debug_context")
        if not isinstance(ctx, dict) or not wants_debug_file(ctx):
            return
        session = self.namespaces.managers[change.namespace].sessions.get(session_id)
        hashes = list(session.chunk_hashes) if session else []
        turn = change.notes.get("turn", 0)
        if not isinstance(turn, int):
            turn = 0
        try:
            path = await asyncio.to_thread(
                write_debug_file, self.config.debug_dir, session_id, turn, hashes, ctx
            )
        except (OSError, ValueError, RecursionError) as err:  # ValueError: not UTF-8
            log.warning(
                "debug file write failed for session %s: %s",
                loggable(session_id),
                loggable(str(err), 500),
            )
            return
        change.data["debug_written"] = True
        log.info("ram-a-kv debug file written path=%s", path)

    def _print_trace(self) -> None:
        if not self.config.trace_events:
            return
        for key, m in self.namespaces.managers.items():
            where = f" namespace={loggable(key)}" if key else ""
            if not m.sessions and not key:
                log.info("[trace] sessions: <empty>")
            for sid, s in m.sessions.items():
                # Escaped: a newline in a session id must not start a forged log line.
                log.info(
                    "[trace] session map session_id=%s state=%s turn_count=%d chunk_hashes=%s%s",
                    loggable(sid, 1100),
                    s.state,
                    s.turn_count,
                    list(s.chunk_hashes),
                    where,
                )
            if m.sessions or not key:
                log.info("[trace] global refcounts%s %s", where, m.refcounts.as_dict())

    # ---- fork expiry ------------------------------------------------------------------
    async def expire_forks(self) -> int:
        """Release every fork hold older than fork_hold_ttl_s, as its fork_end would.

        Each expiry is logged at WARNING (a subagent that never sent its fork_end) and
        published on the trace as a ``fork_expire`` event. Returns how many expired.
        """
        ttl, total = self.config.fork_hold_ttl_s, 0
        for ns in list(self.namespaces):
            if not len(ns.manager.forks):
                continue
            if self.committer.busy:
                await self.committer.barrier()  # never decide from a change still in doubt
            now = self.clock()
            change = ns.manager.expire_forks(now, ttl)
            if change is None:
                continue
            change.namespace = ns.key
            change.notes["_delta"] = self._delta(change)
            try:
                await self.committer.submit(change)
            except StoreError as err:  # rolled back: the next pass tries again
                log.error("fork expiry not persisted (will retry): %s", err)
                continue
            expired = change.data["expired"]
            assert isinstance(expired, list)  # expire_forks' rows
            for row in expired:
                log.warning(
                    "fork hold expired: session=%s fork_id=%s age=%.0fs (older than "
                    "fork_hold_ttl_s=%g; its session_fork_end never came)%s",
                    loggable(str(row["session_id"])),
                    row["fork_id"],
                    row["age_s"],
                    ttl,
                    f" namespace={ns.key}" if ns.key else "",
                )
            total += len(expired)
            change.notes["_touched"] = sorted({str(r["session_id"]) for r in expired})
            self._publish("fork_expire", None, True, change)
            self.metrics.forks_expired.inc(len(change.data["expired"]))  # type: ignore[arg-type]
        return total

    async def _expire_forks_forever(self) -> None:
        """Look for expired holds every ttl/10 (at least 1 s, at most 60 s)."""
        interval = min(60.0, max(1.0, self.config.fork_hold_ttl_s / 10))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_forks()
            except Exception:  # noqa: BLE001 - the loop must outlive one bad pass
                log.exception("fork expiry pass failed")

    # ---- views for the HTTP layer -------------------------------------------------------
    def refresh_gauges(self) -> None:
        """Bring the state gauges up to date before /metrics renders."""
        m = self.metrics
        rows = self.namespaces.describe()
        active = sum(r["sessions"]["active"] for r in rows)
        suspended = sum(r["sessions"]["suspended"] for r in rows)
        m.sessions.labels("active").set(active)
        m.sessions.labels("suspended").set(suspended)
        m.chunks.set(sum(r["chunks"] for r in rows))
        m.references.set(
            sum(x.refcounts.total_references() for x in self.namespaces.managers.values())
        )
        m.subscribers.set(len(self.trace.subscribers))
        m.open_forks.set(sum(len(x.forks) for x in self.namespaces.managers.values()))
        m.evict_backlog.set(sum(r["evict_backlog"] for r in rows))
        m.namespaces(self.namespaces)
        m.store_status(self.ownership.status())
