"""One applied event on its way through the pipeline: its change and what follows it,
as named, typed fields."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import JsonObject
from ramakv_daemon.events.idempotency import AnswerSlot
from ramakv_daemon.events.reads import Delta
from ramakv_daemon.handlers.registry import Effects
from ramakv_daemon.ports import AnswerRowIn
from ramakv_daemon.routing.namespaces import Namespace
from ramakv_protocol.records import BudgetBody


@dataclass(slots=True, eq=False)
class Outcome:
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
        kept: chunks a keep was asked for because this change referenced them again
            (evicted again if it is rolled back).
        prefetch: what is sent to the cache after it (set by the budget policy, which may
            add a demoted session's map; None: the change's own).
        budget_record: the trace record of the budget pass it triggered, if any.
        published: its trace record went out (at its commit, in apply order).
        touched: sessions the record concerns beyond its delta (a fork expiry's parents).
        debug: the debug file's write (True when written); the commit waits for it.
        sealed: the reply is final (its answer was taken for the store).
        on_committed: what publishes its trace record at its commit (None: published by
            whoever submitted it).
    """

    type_: str
    session_id: str | None
    change: Change
    ns: Namespace
    effects: Effects
    started: float = 0.0
    slot: AnswerSlot | None = None
    delta: Delta | None = None
    kept: Sequence[str] = ()
    prefetch: list[str] | None = None
    budget_record: BudgetBody | None = None
    published: bool = False
    touched: Sequence[str] = ()
    debug: asyncio.Future[bool] | None = None
    sealed: bool = False
    on_committed: Callable[[Outcome], None] | None = None

    @property
    def data(self) -> dict[str, object]:
        """The reply's data."""
        return self.change.data

    def reply(self) -> JsonObject:
        """The reply body; final once sealed."""
        self.seal()
        return {"ok": True, "type": self.type_, "data": self.change.data}

    def seal(self) -> None:
        """Make the reply final: what completes it (the debug file) counts if done now."""
        if self.sealed:
            return
        self.sealed = True
        debug = self.debug
        if debug is None or not debug.done() or debug.cancelled():
            return  # not written (yet): the reply says debug_written false
        if debug.exception() is None and debug.result():
            self.change.data["debug_written"] = True

    # ---- what its change record calls at the commit ---------------------------------
    def answer(self) -> AnswerRowIn | None:
        """The event_id answer stored with the change: the final reply."""
        slot = self.slot
        if slot is None:
            return None
        slot.stored = json.dumps(self.reply())
        return (slot.event_id, slot.stored, time.time(), slot.digest)

    def committed(self) -> None:
        """Durable: its trace record goes out now, in apply order (replies resume later,
        in any order; reads answer from committed state, so none of them can be published
        carrying an older map than a write already published). The record carries the
        final reply's data, as the stored answer does."""
        self.seal()
        if self.on_committed is not None:
            self.on_committed(self)
            self.published = True
