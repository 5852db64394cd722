"""One event's way through the daemon: validate -> apply -> commit -> react."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial

from ramakv_daemon.core.catalogue import JsonObject, Limits, check_required
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent, RamAKvError
from ramakv_daemon.handlers import Handler, Registry
from ramakv_daemon.handlers.messages import Message
from ramakv_daemon.ownership.ownership import Ownership
from ramakv_daemon.pipeline.debug_files import DebugWriter
from ramakv_daemon.pipeline.idempotency import AnswerSlot, Reply
from ramakv_daemon.pipeline.outcome import Outcome
from ramakv_daemon.pipeline.reactions import Reactions
from ramakv_daemon.pipeline.reads import Result, apply_settled
from ramakv_daemon.pipeline.trace_records import TraceRecords
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork
from ramakv_daemon.ports import StoreError, StoreFenced
from ramakv_daemon.routing.namespaces import Namespace, Namespaces
from ramakv_daemon.telemetry.log_text import loggable

log = logging.getLogger("ramakv")

# A fenced commit (another node changed the session since this node read it) is applied
# again on the stored state this many times in all; a session still moving then answers 503.
FENCED_TRIES = 4


class Pipeline:
    """Validates an event, applies its handler, commits the change and runs the reactions.

    The handler's change and the pipeline's bookkeeping of it travel as one typed
    :class:`~ramakv_daemon.pipeline.outcome.Outcome`; what follows the event is what its handler's
    :class:`~ramakv_daemon.handlers.registry.Effects` declare and the reactions do.
    """

    def __init__(
        self,
        registry: Registry,
        namespaces: Namespaces,
        uow: UnitOfWork,
        ownership: Ownership,
        records: TraceRecords,
        reactions: Reactions,
        debug: DebugWriter | None,
        clock: Callable[[], float],
        limits: Limits | None = None,
    ) -> None:
        """``debug``: None unless debug_enabled; ``clock``: the wall clock events read;
        ``limits``: the input limits a typed decode checks (the handlers' context's)."""
        self.registry = registry
        self.namespaces = namespaces
        self.uow = uow
        self.ownership = ownership
        self.records = records
        self.reactions = reactions
        self.debug = debug
        self.clock = clock
        self.limits = limits if limits is not None else Limits()

    async def run(self, payload: JsonObject, slot: AnswerSlot | None) -> Reply:
        """One decoded event; returns (HTTP status, response envelope). ``slot``: its
        event_id's answer, stored with its change when it has one."""
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
        try:
            handler = self.registry.get(type_)  # validate
            # Typed at the entry: decoding is validation. A payload the fast decode refuses
            # is checked where it always was (required fields here, the rest at the apply),
            # so its error text and its place among the pipeline's own checks stay.
            event: Message | JsonObject | None = handler.decode(payload, self.limits)
            if event is None:
                check_required(handler.spec, payload)
                event = payload
            o = await self._fenced_tries(handler, type_, session_id, payload, event, slot)
        except StoreError as err:
            status, error = 503, str(err)
        except RamAKvError as err:
            error = str(err)
        except (ValueError, TypeError) as err:  # a handler's own check; never a crash
            error = str(InvalidEvent(str(err)))
        else:
            o.started = started
            await self.reactions.succeeded(o)  # react
            return 200, o.reply()
        self.reactions.failed(type_, session_id, error, started)
        return status, {"ok": False, "type": type_, "error": error}

    async def _fenced_tries(
        self,
        handler: Handler,
        type_: str,
        session_id: str | None,
        payload: JsonObject,
        event: Message | JsonObject,
        slot: AnswerSlot | None,
    ) -> Outcome:
        """Apply and commit. A fenced commit (StoreFenced: nothing written, undone) is
        applied again: ownership first releases the stale copy and claims the row as
        stored, so the event acts on what another node acknowledged, never on the copy."""
        effects = handler.effects
        # A changing event that writes no row of its session (refused, or a no-op) is
        # checked against the stored version instead: no fence sees it (reads never are).
        check = self.ownership.shared and effects.takes_over and not effects.reads
        for _ in range(FENCED_TRIES - 1):
            try:
                o = await self._attempt(handler, type_, session_id, payload, event, slot)
            except RamAKvError:
                if not check or not await self.ownership.stale_copy(session_id):
                    raise
                continue  # refused from a stale copy: applied again on the stored row
            except StoreFenced as err:
                log.info(
                    "event %s for %s applied again: %s", type_, loggable(session_id or ""), err
                )
                if slot is not None:
                    slot.stored = None  # that answer was rolled back with its change
                continue
            wrote = o.change.writes and session_id in o.change.prev_sessions
            if wrote or not check or not await self.ownership.stale_copy(session_id):
                return o
            if slot is not None:  # answered from a stale copy: applied again
                slot.stored = None
        return await self._attempt(handler, type_, session_id, payload, event, slot)

    async def _attempt(
        self,
        handler: Handler,
        type_: str,
        session_id: str | None,
        payload: JsonObject,
        event: Message | JsonObject,
        slot: AnswerSlot | None,
    ) -> Outcome:
        new_fork_id = None
        if self.ownership.shared:  # a shared store: take the session over first
            # The new fork's id first: before() hands over with no await left before the
            # apply, so a release cannot close the session in between.
            if handler.apply is not None:
                new_fork_id = await self.ownership.fork_id(handler.effects.store_fork_id)
            fork_id = payload.get("fork_id")  # a fork_end's fork may be on another node
            await self.ownership.before(handler.effects.takes_over, session_id, fork_id)
        ns = self.namespaces[self.namespaces.resolve(payload)]
        return await self._apply_and_commit(
            handler, type_, session_id, payload, event, ns, slot, new_fork_id
        )

    async def _apply_and_commit(
        self,
        handler: Handler,
        type_: str,
        session_id: str | None,
        payload: JsonObject,
        event: Message | JsonObject,
        ns: Namespace,
        slot: AnswerSlot | None,
        fork_id: int | None = None,
    ) -> Outcome:
        """``event``: the typed message (else the payload, parsed by the handler's apply);
        ``fork_id``: the id a shared store handed out for the fork this event opens."""
        if handler.query is not None:  # asks the backend; changes nothing
            change = await handler.query(ns.ctx, payload, ns.dispatcher.backend)
            return Outcome(type_, session_id, change, ns, handler.effects, slot=slot)
        # Callable[..., Result]: a handler whose spec says store_fork_id takes fork_id too.
        apply: Callable[..., Result] | None = handler.apply
        assert apply is not None  # a handler has one or the other
        if fork_id is not None:
            # Only a handler whose spec says store_fork_id takes it (no other gets one).
            apply = partial(apply, fork_id=fork_id)
        change, delta = await apply_settled(
            handler.effects,
            apply,
            event,
            ns.ctx,
            self.namespaces.managers,
            self.uow,
            partial(self.records.delta, namespace=ns.key),
            self.clock,
        )
        if delta is None:
            # Taken now, before any await, so it is this event's alone.
            delta = self.records.delta(change, ns.key)
        debug = None
        if self.debug is not None and handler.effects.debug_file:
            debug = self._debug_file(session_id, ns, change)
        o = Outcome(type_, session_id, change, ns, handler.effects, 0.0, slot, delta, debug=debug)
        if change.writes:
            await self.uow.commit(ns, change, (o,), debug)  # the keep it needs, its record
        elif o.debug is not None:
            await o.debug
        return o  # its reply is sealed at its commit, else when it is built

    def _debug_file(
        self, session_id: str | None, ns: Namespace, change: Change
    ) -> asyncio.Future[bool] | None:
        """Start the debug file of a turn: the session's map and turn count right now."""
        assert self.debug is not None
        sid = session_id or ""
        session = ns.manager.sessions.get(sid)
        hashes = list(session.chunk_hashes) if session else []
        return self.debug.start(sid, change.facts.turn or 0, hashes, change.debug_context)
