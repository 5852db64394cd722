"""Orchestration: validate -> core -> persist -> backend -> publish trace."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from ramakv_daemon.committer import GroupCommitter
from ramakv_daemon.config import Config
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent, RamAKvError
from ramakv_daemon.core.events import Limits, check_required
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.debug_files import wants_debug_file, write_debug_file
from ramakv_daemon.dispatcher import BackendDispatcher
from ramakv_daemon.handlers import DEFAULT_REGISTRY, HandlerContext, Registry
from ramakv_daemon.idempotency import AnswerCache
from ramakv_daemon.metrics import DaemonMetrics
from ramakv_daemon.ports import Backend, SessionStore, StoreError
from ramakv_daemon.trace import TraceHub

log = logging.getLogger("ramakv")


class EventService:
    """Handles one event end to end and keeps the daemon's moving parts together."""

    def __init__(
        self,
        config: Config,
        store: SessionStore,
        backend: Backend,
        registry: Registry = DEFAULT_REGISTRY,
    ) -> None:
        self.config = config
        self.store = store
        self.backend = backend
        self.registry = registry
        self.manager = SessionManager(
            turn_start_prefetch=config.turn_start_prefetch, max_sessions=config.max_sessions
        )
        self.limits = Limits(config.max_hashes_per_event, config.max_hash_bytes)
        self.ctx = HandlerContext(self.manager, self.limits, registry)
        self.metrics = DaemonMetrics({s.name for s in registry.specs()})
        self.trace = TraceHub(config.trace_buffer, config.trace_queue)
        self.trace.on_drop = self.metrics.dropped_subscribers.inc
        self.committer = GroupCommitter(
            store, self.manager, self.metrics.commit, config.idempotency_ttl_s
        )
        self.dispatcher = BackendDispatcher(
            backend, self.manager, self.committer, self.metrics.backend, self._backend_failed
        )
        self.answers = AnswerCache(config.idempotency_window)
        self.started_at = time.time()

    # ---- life cycle ------------------------------------------------------------------
    async def start(self) -> None:
        """Open the store, restore every session, start the writer."""
        t0 = time.perf_counter()
        await self.store.open()
        sessions = await self.store.load_all()
        self.manager.load(sessions)
        self.dispatcher.load(await self.store.load_outbox())
        for event_id, body in await self.store.load_event_ids(self.config.idempotency_window):
            self.answers.remember(event_id, json.loads(body))
        log.info(
            "ram-a-kv restored %d sessions, %d chunks, %d references in %.3fs from %s",
            len(self.manager.sessions), len(self.manager.refcounts),
            self.manager.refcounts.total_references(), time.perf_counter() - t0,
            self.config.session_store_path,
        )
        if self.dispatcher.backlog:
            log.info(
                "ram-a-kv %d evictions from the outbox will be retried", self.dispatcher.backlog
            )
        self.committer.start()
        self.dispatcher.start()

    async def stop(self) -> None:
        """Close subscribers, flush commits and backend calls, close the store."""
        self.trace.close_all("daemon shutting down")
        await self.dispatcher.close()
        await self.dispatcher.drain()
        await self.committer.close()
        await self.store.close()
        await self.backend.close()

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
        event_id = payload["event_id"]
        if not isinstance(event_id, str) or not 0 < len(event_id) <= 200 or not _utf8(event_id):
            return 200, {
                "ok": False, "type": payload.get("type"),
                "error": "event_id must be a non-empty string of at most 200 characters "
                "(valid Unicode)",
            }
        known = self.answers.get(event_id)
        if known is not None:
            return 200, known
        inflight = self.answers.inflight.get(event_id)
        if inflight is not None:
            return await asyncio.shield(inflight)
        fut: asyncio.Future[tuple[int, dict[str, Any]]] = (
            asyncio.get_running_loop().create_future()
        )
        self.answers.inflight[event_id] = fut
        try:
            status, body = await self._handle(payload, event_id)
            if status == 200:
                self.answers.remember(event_id, body)
            fut.set_result((status, body))
            return status, body
        finally:
            self.answers.inflight.pop(event_id, None)
            if not fut.done():
                fut.cancel()

    async def _handle(
        self, payload: dict[str, Any], event_id: str | None
    ) -> tuple[int, dict[str, Any]]:
        started = time.perf_counter()
        type_ = payload.get("type")
        if not isinstance(type_, str) or not type_:
            log.warning("event rejected: missing or empty 'type' field")
            return 200, {"ok": False, "error": "missing or empty 'type' field"}
        sid = payload.get("session_id")
        session_id = sid if isinstance(sid, str) else None
        log.info(
            "ram-a-kv event received type=%s session_id=%s", _loggable(type_),
            _loggable(session_id or ""),
        )
        status = 200
        change: Change | None = None
        try:
            handler = self.registry.get(type_)
            check_required(handler.spec, payload)
            if handler.query is not None:
                change = await handler.query(self.ctx, payload, self.backend)
            else:
                change = await self._apply(handler.apply, payload)
                # The delta is taken now, before any await, so it is this event's alone.
                change.notes["_delta"] = self._delta(change)
                if change.durable or change.evict_delete or change.evict_demote:
                    answer = None
                    if event_id is not None:
                        body = {"ok": True, "type": type_, "data": change.data}
                        answer = (event_id, json.dumps(body), time.time())
                    await self.committer.submit(change, answer)
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

    async def _apply(self, apply: Any, payload: dict[str, Any]) -> Change:
        """Apply a handler; a read or a refusal never answers from a change still in doubt.

        While earlier changes wait for their commit, an answer that changes nothing (a
        read, or an error) could be contradicted by their rollback: wait for them, then
        apply again (a read or a refusal changed nothing, so applying again is safe).
        """
        busy = self.committer.busy
        try:
            change = apply(self.ctx, payload, time.time())
        except RamAKvError:
            if not busy:
                raise
            await self.committer.barrier()
            return apply(self.ctx, payload, time.time())
        if busy and not (change.durable or change.evict_delete or change.evict_demote):
            await self.committer.barrier()
            change = apply(self.ctx, payload, time.time())
        return change

    def _succeeded(
        self, type_: str, session_id: str | None, change: Change, started: float
    ) -> dict[str, Any]:
        c = change
        if c.notes.get("forced"):
            log.warning(
                "chunk_evict force: released references %s", c.data.get("released")
            )
        self.dispatcher.evictions_committed(c.evict_delete, c.evict_demote)
        self.dispatcher.prefetch(session_id, c.prefetch)
        self._publish(type_, session_id, True, c)
        elapsed = time.perf_counter() - started
        self.metrics.event(type_, True, elapsed)
        log.info(
            "ram-a-kv event completed type=%s session_id=%s ms=%.2f",
            type_, _loggable(session_id or ""), elapsed * 1000,
        )
        self._print_trace()
        return {"ok": True, "type": type_, "data": c.data}

    def _failed(
        self, type_: str, session_id: str | None, error: str, started: float
    ) -> dict[str, Any]:
        self.metrics.event(type_, False, time.perf_counter() - started)
        log.warning(
            "ram-a-kv event failed type=%s session_id=%s error=%s", _loggable(type_),
            _loggable(session_id or ""), _loggable(error, 500),
        )
        self.trace.publish(
            {"kind": "event", "ts": time.time(), "type": type_, "session_id": session_id,
             "ok": False, "error": error, "delta": {"sessions": {}, "refcounts": {}}}
        )
        self._print_trace()
        return {"ok": False, "type": type_, "error": error}

    def _backend_failed(self, op: str, count: int, result: Any, backlog: int) -> None:
        self.trace.publish(
            {"kind": "backend", "ts": time.time(), "op": op, "count": count, "ok": False,
             "status": result.status, "detail": result.detail, "backlog": backlog}
        )

    def _delta(self, c: Change) -> dict[str, Any]:
        sessions = self.manager.sessions
        counts = self.manager.refcounts.counts
        return {
            "sessions": {
                sid: (sessions[sid].to_dict() if sid in sessions else None)
                for sid in c.prev_sessions
            },
            "refcounts": {h: counts.get(h, 0) for h in c.prev_counts},
        }

    def _publish(self, type_: str, session_id: str | None, ok: bool, c: Change) -> None:
        delta = c.notes.get("_delta") or self._delta(c)
        record: dict[str, Any] = {
            "kind": "event", "ts": time.time(), "type": type_, "session_id": session_id,
            "ok": ok, "data": c.data, "delta": delta,
            "prefetch": c.prefetch, "evict": c.evict_delete, "demote": c.evict_demote,
        }
        notes = {k: v for k, v in c.notes.items() if k not in ("debug_context", "_delta")}
        if notes:
            record["notes"] = notes
        self.trace.publish(record)

    async def _write_debug(self, session_id: str, change: Change) -> None:
        ctx = change.notes.get("debug_context")
        if not isinstance(ctx, dict) or not wants_debug_file(ctx):
            return
        session = self.manager.sessions.get(session_id)
        hashes = list(session.chunk_hashes) if session else []
        turn = int(change.notes.get("turn", 0))  # type: ignore[arg-type]
        try:
            path = await asyncio.to_thread(
                write_debug_file, self.config.debug_dir, session_id, turn, hashes, ctx
            )
        except (OSError, ValueError) as err:  # ValueError: text that cannot be UTF-8
            log.warning("debug file write failed for session %s: %s", session_id, err)
            return
        change.data["debug_written"] = True
        log.info("ram-a-kv debug file written path=%s", path)

    def _print_trace(self) -> None:
        if not self.config.trace_events:
            return
        sessions = self.manager.sessions
        if not sessions:
            log.info("[trace] sessions: <empty>")
        for sid, s in sessions.items():
            log.info(
                "[trace] session map session_id=%s state=%s turn_count=%d chunk_hashes=%s",
                sid, s.state, s.turn_count, list(s.chunk_hashes),
            )
        log.info("[trace] global refcounts %s", self.manager.refcounts.as_dict())

    # ---- views for the HTTP layer -------------------------------------------------------
    def snapshot(self, session: str | None = None) -> dict[str, Any]:
        """The trace stream's first message: all sessions and refcounts at ``seq``."""
        sessions = self.manager.sessions
        if session is not None:
            picked = {session: sessions[session].to_dict()} if session in sessions else {}
            wanted = set(picked[session]["chunk_hashes"]) if picked else set()  # type: ignore[arg-type]
            counts = {h: n for h, n in self.manager.refcounts.items() if h in wanted}
        else:
            picked = {sid: s.to_dict() for sid, s in sessions.items()}
            counts = self.manager.refcounts.as_dict()
        return {"kind": "snapshot", "seq": self.trace.seq, "epoch": self.trace.epoch,
                "ts": time.time(),
                "sessions": picked, "refcounts": counts}

    def refresh_gauges(self) -> None:
        """Bring the state gauges up to date before /metrics renders."""
        m = self.metrics
        suspended = sum(1 for s in self.manager.sessions.values() if s.suspended)
        m.sessions.labels("active").set(len(self.manager.sessions) - suspended)
        m.sessions.labels("suspended").set(suspended)
        m.chunks.set(len(self.manager.refcounts))
        m.references.set(self.manager.refcounts.total_references())
        m.subscribers.set(len(self.trace.subscribers))
        m.evict_backlog.set(self.dispatcher.backlog)


def _utf8(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (no lone surrogates), so SQLite can store it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _loggable(text: str, limit: int = 200) -> str:
    """``text`` as is when printable and short; else its repr, cut: one event, one log line."""
    if len(text) <= limit and text.isprintable():
        return text
    return repr(text[:limit]) + ("..." if len(text) > limit else "")
