"""Group commit: concurrent events share one SQLite transaction; a reply waits for it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.fork import Fork, ForkIds
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import AnswerRowIn, EvictMode, SessionStore, StoreError, StoreFenced

log = logging.getLogger("ramakv.store")

PRUNE_EVERY_COMMITS = 1000
# A hang guard only: a commit waits for the cache's answer to a keep its changes need (a
# chunk referenced again while its deferred delete may be pending), and the dispatcher
# resolves that wait at the evict's deadline at the latest (evict_defer_s + 1.5 s; see
# ramakv_daemon/delivery/evict_window.py), so this is never reached unless that timer is lost.
KEEP_WAIT_S = 90.0
# How long a commit waits for work that completes its reply (a turn_end's debug file):
# the answer stored with the change is then the reply sent. Past it the commit goes
# ahead and the reply says what was done by then.
READY_WAIT_S = 1.0


class Ticket(Protocol):
    """The submitter's side of one queued change, told what became of it.

    The committer calls, in this order for each committed change: :meth:`answer` as the
    transaction is built (the event_id answer to store with it, from the final reply),
    :meth:`evictions_durable` (when it has evictions) before any waiter resumes, then
    :meth:`committed` in apply order; or :meth:`rolled_back` when the commit failed.
    """

    def answer(self) -> AnswerRowIn | None: ...

    def evictions_durable(self, row: int) -> None: ...

    def committed(self) -> None: ...

    def rolled_back(self) -> None: ...


@dataclass(slots=True)
class _Pending:
    """One queued write: an applied change (with its future) or an outbox clean-up."""

    change: Change | None
    manager: SessionManager | None
    sessions: dict[str, Session | None]
    forks: dict[int, Fork | None]
    done_rows: list[int]
    answer: AnswerRowIn | None  # an answer queued alone
    future: asyncio.Future[None] | None
    ticket: Ticket | None = None
    gate: asyncio.Future[None] | None = None
    ready: asyncio.Future[Any] | None = None


class GroupCommitter:
    """Batches the store writes of applied changes and resolves each when durable.

    Memory is changed first (the core is synchronous), so a failed commit must undo
    every change not yet durable — the failed batch and all queued behind it, newest
    first — leaving memory equal to what the database holds. A change's evictions go to
    the outbox table in the same transaction, so an acknowledged eviction survives a crash.
    """

    def __init__(
        self,
        store: SessionStore,
        fork_ids: ForkIds,
        on_commit: Callable[[float, int], None] | None = None,
        event_id_ttl_s: float = 3600.0,
    ) -> None:
        """``fork_ids``: the store-wide fork id counter (stored with every commit that
        writes forks); ``on_commit(seconds, batch size)``: after each commit (metrics).

        What each change's submitter does at its commit or rollback is its
        :class:`Ticket`: every committed change's evictions are handed to delivery before
        any waiter resumes (all of a row's entries are registered at once, so delivering
        some cannot retire the row while others are still unseen), and the trace records
        are published there, in apply order."""
        self.store = store
        self.fork_ids = fork_ids
        self.on_commit = on_commit
        self.event_id_ttl_s = event_id_ttl_s
        self._pending: list[_Pending] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._commits = 0
        self.next_row_id = 1  # the service sets it above the stored rows at start-up
        self._last: asyncio.Future[None] | None = None
        self._inflight: list[_Pending] = []  # the batch whose write is under way
        self.last_error: str | None = None  # why the latest commit failed; None after a success
        # Told, before any waiter resumes, of the sessions a fenced commit found changed
        # by another node (routing.ownership: their copies here are stale).
        self.on_fenced: Callable[[tuple[str, ...]], None] | None = None

    def start(self) -> None:
        """Start the writer task on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="group-commit")

    def submit(
        self,
        change: Change,
        manager: SessionManager,
        ticket: Ticket | None = None,
        gate: asyncio.Future[None] | None = None,
        ready: asyncio.Future[Any] | None = None,
    ) -> asyncio.Future[None]:
        """Queue ``change`` (applied by ``manager``): its sessions, forks, evictions and
        its ticket's answer; await the commit. The commit first waits for ``gate``, the
        cache's answer to a keep or its evict's deadline, and (at most
        READY_WAIT_S) for ``ready``, what completes the reply."""
        live = manager.sessions
        sessions = {sid: live.get(sid) for sid in change.prev_sessions}
        forks = {fid: manager.forks.get(fid) for fid in change.prev_forks}
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(
            _Pending(change, manager, sessions, forks, [], None, fut, ticket, gate, ready)
        )
        self._last = fut
        self._wake.set()
        return fut

    def submit_answer(self, answer: AnswerRowIn) -> asyncio.Future[None]:
        """Queue an answer alone (an event that changed nothing); await the commit. A
        failure undoes nothing of its own."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(None, None, {}, {}, [], answer, fut))
        self._last = fut
        self._wake.set()
        return fut

    @property
    def busy(self) -> bool:
        """True while some submitted change is not yet committed or rolled back."""
        return self._last is not None and not self._last.done()

    def uncommitted(self, namespace: str) -> list[Change]:
        """``namespace``'s applied changes not yet committed or rolled back, oldest first."""
        return [
            p.change
            for p in (*self._inflight, *self._pending)
            if p.change is not None and p.change.namespace == namespace
        ]

    def touched(self, namespace: str, hashes: list[str]) -> set[str]:
        """Those of ``hashes`` whose refcount an uncommitted change of ``namespace``
        moved: their committed count is not known yet (that change may be rolled back)."""
        changes = self.uncommitted(namespace) if self.busy else []
        if not changes:
            return set()
        wanted = set(hashes)
        out: set[str] = set()
        for c in changes:
            counts = c.prev_counts
            if len(counts) < len(wanted):
                out.update(h for h in counts if h in wanted)
            else:
                out.update(h for h in wanted if h in counts)
        return out

    async def barrier(self) -> None:
        """Wait until every change submitted so far is committed or rolled back.

        Reads call this first so they never answer from a change that may still fail.
        """
        last = self._last
        if last is not None and not last.done():
            await asyncio.wait([last])

    def forget_rows(self, row_ids: list[int]) -> None:
        """Queue the deletion of outbox rows none of whose entries waits; nobody waits."""
        if row_ids:
            self._pending.append(_Pending(None, None, {}, {}, list(row_ids), None, None))
            self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._pending:
                if self._closing:
                    return
                continue
            batch, self._pending = self._pending, []
            self._inflight = batch
            try:
                ready = [p.ready for p in batch if p.ready is not None and not p.ready.done()]
                if ready:
                    await asyncio.wait(ready, timeout=READY_WAIT_S)
                gates = [p.gate for p in batch if p.gate is not None and not p.gate.done()]
                if gates:
                    _, late = await asyncio.wait(gates, timeout=KEEP_WAIT_S)
                    for gate in late:
                        gate.cancel()  # committed without the cache's word on that keep
                await self._commit(batch)
            finally:
                self._inflight = []

    async def _commit(self, batch: list[_Pending]) -> None:
        sessions: dict[str, Session | None] = {}
        forks: dict[int, Fork | None] = {}
        evictions: dict[str, list[tuple[str, EvictMode]]] = {}
        done: list[int] = []
        answers: list[AnswerRowIn] = []
        for p in batch:
            sessions.update(p.sessions)
            forks.update(p.forks)
            done.extend(p.done_rows)
            c = p.change
            if c is not None and (c.evict_delete or c.evict_demote):
                entries = evictions.setdefault(c.namespace, [])
                # Plain pairs: orjson writes them without a call back per entry.
                entries.extend((h, EvictMode.DELETE) for h in c.evict_delete)
                entries.extend((h, EvictMode.DEMOTE) for h in c.evict_demote)
            # The answer is read now, as the transaction is built: the reply is final.
            answer = p.answer if p.ticket is None else p.ticket.answer()
            if answer is not None:
                answers.append(answer)
        # One outbox row per namespace for the whole batch; the dispatcher deletes the row
        # once none of its entries waits any more.
        row_of: dict[str, int] = {}
        for ns in evictions:
            row_of[ns] = self.next_row_id
            self.next_row_id += 1
        rows = [(row_of[ns], ns, entries) for ns, entries in evictions.items()]
        self._commits += 1
        prune = None
        if answers and self._commits % PRUNE_EVERY_COMMITS == 0:
            prune = time.time() - self.event_id_ttl_s
        started = time.perf_counter()
        try:
            if forks:
                # One counter for the whole store; a value above ids not yet committed is
                # harmless (those are skipped), one below would let a restart reuse an id.
                await self.store.write(
                    sessions, rows, done, answers, prune, forks, self.fork_ids.next_id
                )
            else:
                await self.store.write(sessions, rows, done, answers, prune)
        except StoreFenced as err:
            # Another node changed some of these rows: nothing was written. Undone as any
            # failure (memory equals the database again); each event is refused with it,
            # and the pipeline applies it again on the stored state.
            if self.on_fenced is not None:
                self.on_fenced(err.sessions)
            self._fail(batch, err, fenced=True)
            return
        except Exception as err:  # noqa: BLE001 - any failure must undo, not kill the loop
            self._fail(batch, err)
            return
        self.last_error = None
        if self.on_commit is not None:
            self.on_commit(time.perf_counter() - started, len(batch))
        tickets = [p for p in batch if p.ticket is not None and p.change is not None]
        for p in tickets:
            c = p.change
            if c is not None and p.ticket is not None and (c.evict_delete or c.evict_demote):
                p.ticket.evictions_durable(row_of[c.namespace])
        for p in tickets:
            if p.ticket is not None:
                p.ticket.committed()
        for p in batch:
            if p.future is not None and not p.future.done():
                p.future.set_result(None)

    def _fail(self, batch: list[_Pending], err: Exception, fenced: bool = False) -> None:
        failed = batch + self._pending
        self._pending = []
        for p in reversed(failed):
            if p.change is not None and p.manager is not None:
                p.manager.undo(p.change)
        for p in failed:
            if p.ticket is not None:
                p.ticket.rolled_back()
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
