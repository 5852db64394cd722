"""Group commit: concurrent events share one SQLite transaction; a reply waits for it. A
change waiting for a keep waits alone (commit/holding.py): unrelated changes commit past it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat

from ramakv_daemon.commit.holding import Holding, watch
from ramakv_daemon.commit.ledger import OutboxLedger
from ramakv_daemon.commit.record import (
    ChangeRecord,
    CommitMeter,
    Committed,
    Fenced,
    Subscriber,
)
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.fork import Fork, ForkIds
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import (
    BACKGROUND,
    AnswerRow,
    EvictMode,
    OutboxRow,
    SessionStore,
    StoreError,
    StoreFenced,
    WriteBatch,
)

log = logging.getLogger("ramakv.store")

PRUNE_EVERY_COMMITS = 1000
# A hang guard only: a change waits for the cache's answer to a keep it needs (a chunk
# referenced again while its deferred delete may be pending), and the dispatcher resolves
# that wait at the evict's deadline at the latest (evict_defer_s + 1.5 s; see
# ramakv_daemon/delivery/evict_window.py), so this is never reached unless that timer is lost.
# Only that change and those touching what it touched wait (Holding); the rest commit.
KEEP_WAIT_S = 90.0
# How long a commit waits for work that completes its reply (a turn_end's debug file):
# the answer stored with the change is then the reply sent. Past it the commit goes
# ahead and the reply says what was done by then.
READY_WAIT_S = 1.0


@dataclass(slots=True)
class _Pending:
    """One queued write: a change's record, an answer alone, or retired outbox rows."""

    record: ChangeRecord | None
    done_rows: list[int]
    answer: AnswerRow | None  # an answer queued alone
    future: asyncio.Future[None] | None
    background: bool = False  # submitted by background work (ports.BACKGROUND)


def _change_of(p: _Pending) -> tuple[str, Change] | None:
    return None if p.record is None else (p.record.namespace, p.record.change)


def _background(batch: list[_Pending]) -> bool:
    """True for a batch of background changes alone (retired rows may ride along)."""
    changes = [p for p in batch if p.record is not None or p.answer is not None]
    return bool(changes) and all(p.background for p in changes)


def _gate_of(p: _Pending) -> asyncio.Future[None] | None:
    return None if p.record is None else p.record.gate


class GroupCommitter:
    """Batches the store writes of applied changes and resolves each when durable.

    Memory is changed first (the core is synchronous), so a failed commit must undo
    every change not yet durable — the failed batch, the held ones and all queued behind
    it, newest first — leaving memory equal to what the database holds (a change that
    committed past a held one touched nothing it touched, so undoing it stays exact). A
    change's evictions go to the outbox table in the same transaction, so an acknowledged
    eviction survives a crash.
    """

    def __init__(
        self,
        store: SessionStore,
        fork_ids: ForkIds,
        ledger: OutboxLedger | None = None,
        meter: CommitMeter | None = None,
        event_id_ttl_s: float = 3600.0,
        *,
        subscribers: Sequence[Subscriber] = (),
    ) -> None:
        """``fork_ids``: the store-wide fork id counter (stored with every commit that
        writes forks); ``ledger``: what is in doubt, and where retired rows are picked up;
        ``meter``: told each commit's time and batch size (the metrics); ``subscribers``:
        told each batch made durable (Committed) and the sessions a fenced commit found
        changed elsewhere (Fenced), in this order, before any waiter resumes — after the
        ledger, which is always told first (it leaves every row whole for delivery, and
        takes the records out of doubt). Only the port is known here: what listens is the
        composition root's choice."""
        self.store = store
        self.fork_ids = fork_ids
        self.ledger = ledger if ledger is not None else OutboxLedger()
        self.meter = meter
        self.subscribers: tuple[Subscriber, ...] = (self.ledger, *subscribers)
        # Each told only what it listens to (the port's no-op is never called per commit).
        self._on_committed = tuple(
            s.on_committed
            for s in self.subscribers
            if type(s).on_committed is not Subscriber.on_committed
        )
        self._on_fenced = tuple(
            s.on_fenced for s in self.subscribers if type(s).on_fenced is not Subscriber.on_fenced
        )
        self.event_id_ttl_s = event_id_ttl_s
        self._pending: list[_Pending] = []
        self._wake = self.ledger.writer_wake  # delivery retiring rows wakes the writer too
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._commits = 0
        self.next_row_id = 1  # the service sets it above the stored rows at start-up
        self._last: asyncio.Future[None] | None = None
        self._inflight: list[_Pending] = []  # the batch whose write is under way
        # Changes waiting for a keep, and those touching what they touched, oldest first.
        self._held: Holding[_Pending] = Holding(_change_of, _gate_of)
        self.last_error: str | None = None  # why the latest commit failed; None after a success

    def start(self) -> None:
        """Start the writer task on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="group-commit")

    def submit(self, record: ChangeRecord) -> asyncio.Future[None]:
        """Queue ``record`` (its sessions, forks, evictions and answer); await the commit.
        The commit first waits for its ``gate`` and (at most READY_WAIT_S) its ``ready``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(record, [], None, fut, BACKGROUND.get()))
        self.ledger.submitted(record)
        gate = record.gate
        if gate is not None and not gate.done():
            watch(gate, self._wake.set, KEEP_WAIT_S)  # its answer releases it
        self._last = fut
        self._wake.set()
        return fut

    def submit_answer(self, answer: AnswerRow) -> asyncio.Future[None]:
        """Queue an answer alone (an event that changed nothing); await the commit. A
        failure undoes nothing of its own."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(None, [], answer, fut))
        self._last = fut
        self._wake.set()
        return fut

    @property
    def busy(self) -> bool:
        """True while some submitted change is not yet committed or rolled back."""
        return (
            (self._last is not None and not self._last.done())
            or bool(self._held)
            or bool(self._inflight)
        )

    def uncommitted(self, namespace: str) -> list[Change]:
        """``namespace``'s applied changes not yet committed or rolled back, oldest first
        (a held change and one in flight past it touched nothing in common: their order
        does not matter)."""
        return [
            p.record.change
            for p in (*self._inflight, *self._held.items, *self._pending)
            if p.record is not None and p.record.namespace == namespace
        ]

    async def barrier(self) -> None:
        """Wait until every change submitted so far is committed or rolled back.

        Reads call this first so they never answer from a change that may still fail.
        """
        waits = [
            p.future
            for p in (*self._inflight, *self._held.items, *self._pending)
            if p.future is not None and not p.future.done()
        ]
        if waits:
            await asyncio.wait(waits)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            retired = self.ledger.take_retired()
            if retired:  # rows delivery retired: deleted in this transaction
                self._pending.append(_Pending(None, retired, None, None))
            # What waits for a keep stays held; the rest commits now (a gate's answer,
            # or its give-up, wakes this loop to release what it held).
            batch, self._pending = self._held.admit(self._pending), []
            if not batch:
                if self._closing and not self._held:
                    return
                continue
            self._inflight = batch
            try:
                records = [p.record for p in batch if p.record is not None]
                ready = [r.ready for r in records if r.ready is not None and not r.ready.done()]
                if ready:
                    await asyncio.wait(ready, timeout=READY_WAIT_S)
                await self._commit(batch)
            finally:
                self._inflight = []

    async def _commit(self, batch: list[_Pending]) -> None:
        sessions: dict[str, Session | None] = {}
        forks: dict[int, Fork | None] = {}
        evictions: dict[str, list[tuple[str, EvictMode]]] = {}
        done: list[int] = []
        answers: list[AnswerRow] = []
        moved: set[str] = set()  # sessions some change of the batch gave a new map
        for p in batch:
            done.extend(p.done_rows)
            r = p.record
            answer = p.answer
            if r is not None:
                sessions.update(r.sessions)
                moved.update(_maps_moved(r))
                forks.update(r.forks)
                if r.evicts:
                    entries = evictions.setdefault(r.namespace, [])
                    # Plain pairs: orjson writes them without a call back per entry;
                    # zipped in C, not a generator step per evicted chunk.
                    entries.extend(zip(r.evict_delete, repeat(EvictMode.DELETE)))
                    entries.extend(zip(r.evict_demote, repeat(EvictMode.DEMOTE)))
                    entries.extend(zip(r.evict_cold, repeat(EvictMode.COLD)))
                # The answers are read now, as the transaction is built: the replies are final.
                for reply in r.replies:
                    given = reply.answer()
                    if given is not None:
                        answers.append(given)
            if answer is not None:
                answers.append(answer)
        # One outbox row per namespace for the whole batch; delivery retires the row once
        # none of its entries waits any more.
        row_of: dict[str, int] = {}
        for ns in evictions:
            row_of[ns] = self.next_row_id
            self.next_row_id += 1
        rows = [OutboxRow(row_of[ns], ns, tuple(entries)) for ns, entries in evictions.items()]
        self._commits += 1
        prune = None
        if answers and self._commits % PRUNE_EVERY_COMMITS == 0:
            prune = time.time() - self.event_id_ttl_s
        # Only their state rows change (a turn_start's time): the store skips their maps.
        kept = {sid for sid, s in sessions.items() if s is not None and sid not in moved}
        started = time.perf_counter()
        # A batch of background changes alone may be written off the loop (ports.BACKGROUND).
        token = BACKGROUND.set(_background(batch))
        try:
            # One counter for the whole store, written with forks only: a value above ids
            # not yet committed is harmless (those are skipped), one below would let a
            # restart reuse an id.
            next_fork_id = self.fork_ids.next_id if forks else None
            await self.store.write(
                WriteBatch(sessions, rows, done, answers, prune, forks, next_fork_id, kept)
            )
        except StoreFenced as err:
            # Another node changed some of these rows: nothing was written. Undone as any
            # failure (memory equals the database again); each event is refused with it,
            # and the pipeline applies it again on the stored state.
            refused = Fenced(err.sessions)
            for on_fenced in self._on_fenced:
                on_fenced(refused)
            self._fail(batch, err, fenced=True)
            return
        except Exception as err:  # any failure must undo, not kill the loop
            self._fail(batch, err)
            return
        finally:
            BACKGROUND.reset(token)
        self.last_error = None
        if self.meter is not None:
            self.meter.commit(time.perf_counter() - started, len(batch))
        # Told before any waiter resumes: what a reply or a read sees next is committed.
        committed = Committed([p.record for p in batch if p.record is not None], row_of)
        for on_committed in self._on_committed:
            on_committed(committed)
        for p in batch:
            if p.future is not None and not p.future.done():
                p.future.set_result(None)

    def _fail(self, batch: list[_Pending], err: Exception, fenced: bool = False) -> None:
        # Undone newest first: what was queued, then the held changes, then the batch (a
        # held change older than a batch change touched nothing it touched).
        failed = batch + self._held.take() + self._pending
        self._pending = []
        unkept: dict[str, list[str]] = {}
        for p in reversed(failed):
            if p.record is not None:
                p.record.manager.undo(p.record.change)
        for p in failed:
            if p.record is not None and p.record.kept:
                unkept.setdefault(p.record.namespace, []).extend(p.record.kept)
        self.ledger.failed(unkept)
        error = err if isinstance(err, StoreError) else StoreError(f"persistence failed: {err}")
        if fenced:  # the store is fine: not a failure to report as one
            log.warning("commit of %d writes fenced, state rolled back: %s", len(failed), error)
        else:
            self.last_error = str(error)
            log.error("commit of %d writes failed, state rolled back: %s", len(failed), error)
        for p in failed:
            if p.future is not None and not p.future.done():
                p.future.set_exception(error)

    async def close(self) -> None:
        """Commit what is queued, then stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=10)
            except TimeoutError:
                self._task.cancel()


def _maps_moved(record: ChangeRecord) -> list[str]:
    """The sessions ``record`` writes whose map or turn count it changed. The others (a
    turn_start's time, a suspend) keep the map object: evolve() passes it on, and a new
    map is a new object even when equal, so the store may write only their state row."""
    prev = record.change.prev_sessions
    moved = []
    for sid, new in record.sessions.items():
        old = prev.get(sid)
        if (
            old is None
            or new is None
            or old.chunk_hashes is not new.chunk_hashes
            or old.turn_count != new.turn_count
        ):
            moved.append(sid)
    return moved
