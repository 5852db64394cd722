"""One applied event on its way through the pipeline: its change and what follows it,
as named, typed fields."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ramakv_daemon.commit.record import Reply
from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.registry import Effects
from ramakv_daemon.pipeline.idempotency import AnswerSlot
from ramakv_daemon.pipeline.reads import Delta
from ramakv_daemon.ports import AnswerRow
from ramakv_daemon.routing.namespaces import Namespace


@dataclass(slots=True, eq=False)
class Outcome(Reply):
    """A successful event: the handler's change plus the pipeline's bookkeeping of it.

    Attributes:
        type_: the event type.
        session_id: the event's session_id when it is a string.
        change: what the handler applied (reply data, refcount delta, effects).
        ns: the namespace it applied to.
        effects: what its handler declares follows it.
        started: ``time.perf_counter()`` when the event arrived.
        slot: its event_id's answer in progress (None without an event_id).
        delta: the trace delta, taken right after the apply (before any await).
        touched: sessions the record concerns beyond its delta (a fork expiry's parents).
        debug: the debug file's write (True when written); the commit waits for it.
        published: its trace record went out (at its commit, in apply order).
        sealed: the reply is final (its answer was taken for the store).
        debug_written: the sealed reply says its debug file was written (the change's
            own data is never modified: the reply's data is a copy then).

    Built whole by the pipeline (or a sweep); afterwards only its own methods
    change it (sealing the reply, noting the publication).
    """

    type_: str
    session_id: str | None
    change: Change
    ns: Namespace
    effects: Effects
    started: float = 0.0
    slot: AnswerSlot | None = None
    delta: Delta | None = None
    touched: Sequence[str] = ()
    debug: asyncio.Future[bool] | None = None
    published: bool = False
    sealed: bool = False
    debug_written: bool = False

    @property
    def data(self) -> dict[str, object]:
        """The reply's data."""
        if self.debug_written:
            return {**self.change.data, "debug_written": True}
        return self.change.data

    def reply(self) -> JsonObject:
        """The reply body; final once sealed."""
        self.seal()
        return {"ok": True, "type": self.type_, "data": self.data}

    def seal(self) -> None:
        """Make the reply final: what completes it (the debug file) counts if done now."""
        if self.sealed:
            return
        self.sealed = True
        debug = self.debug
        if debug is None or not debug.done() or debug.cancelled():
            return  # not written (yet): the reply says debug_written false
        if debug.exception() is None and debug.result():
            self.debug_written = True

    # ---- read at its commit (the commit.record.Reply port), told once committed -------
    def answer(self) -> AnswerRow | None:
        """The event_id answer stored with the change: the final reply (read as its
        commit's transaction is built)."""
        slot = self.slot
        if slot is None:
            return None
        slot.stored = json.dumps(self.reply())
        return AnswerRow(slot.event_id, slot.stored, time.time(), slot.digest)

    def committed(self, publish: Callable[[Outcome], None]) -> None:
        """Durable: its trace record goes out now (``publish``; TraceRecords.on_committed
        calls it in apply order). The record carries the final reply's data, as the
        stored answer does."""
        self.seal()
        publish(self)
        self.published = True
