"""Ownership's commands: what the database says another node holds is closed here, what an
event claimed from another node is adopted here, what this node owes its cache for
sessions lost while it held them not is evicted."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractContextManager, ExitStack

from ramakv_daemon.bus.commands import AdoptSession, CheckOwners, ReleaseSession, SettleOwed
from ramakv_daemon.bus.messagebus import Dispatch, MessageBus
from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.ownership.ownership import AdoptFirst, Ownership, ReleaseFirst
from ramakv_daemon.pipeline.idempotency import AnswerSlot, Reply
from ramakv_daemon.pipeline.pipeline import FENCED_TRIES, Pipeline
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork
from ramakv_daemon.ports import EvictMode, OutboxRow, StoreError, StoreFenced

log = logging.getLogger("ramakv.ownership")


class MovedForks:
    """Ends here the forks of a released session whose rows moved with it (and forks whose
    parent is gone): each as its fork_end would, through the pipeline on this node's copy."""

    def __init__(self, ownership: Ownership, pipeline: Pipeline) -> None:
        self.ownership = ownership
        self.pipeline = pipeline

    async def end_moved(self, key: str, session_id: str, fork_ids: list[int]) -> int:
        """End here the forks of ``session_id`` whose rows this node no longer owns (the
        takeover moved them); those still ours stay (an admin close leaves forks)."""
        owners = await self.ownership.shared_store.fork_owners_of(fork_ids)
        ended = [await self.end_here(key, session_id, fid, owners) for fid in fork_ids]
        return sum(ended)

    async def end_here(
        self, key: str, session_id: str, fork_id: int, owners: dict[int, str]
    ) -> bool:
        """End fork ``fork_id`` as its fork_end would, unless its row is still this node's.
        Its commit deletes no row: the store deletes only forks this node owns."""
        if owners.get(fork_id) == self.ownership.shared_store.node_id:
            return False
        payload: JsonObject = {
            "type": "session_fork_end",
            "session_id": session_id,
            "fork_id": fork_id,
            "namespace": key,
        }
        with self.ownership.local(session_id):  # never take the parent over to end a fork
            status, body = await self.pipeline.run(payload, None)
        data = body.get("data")
        if status == 200 and isinstance(data, dict) and data.get("fork_end"):
            return True
        log.warning("ending fork %d (moved off this node) failed: %s", fork_id, body.get("error"))
        return False


class ReleasingSessions:
    """Handles :class:`ReleaseSession`. The check that the session is untouched since the
    database was asked and its close's apply run in one loop step (the pipeline applies a
    ``local`` close in its first step, before any await): an event for the session in
    between would otherwise be closed away."""

    def __init__(self, ownership: Ownership, pipeline: Pipeline, forks: MovedForks) -> None:
        self.ownership = ownership
        self.pipeline = pipeline
        self.forks = forks

    async def __call__(self, command: ReleaseSession, _uow: UnitOfWork) -> bool:
        own, session_id = self.ownership, command.session_id
        ns = own.releasable(session_id, command.seen)
        if ns is None:
            return False
        forks = [f.fork_id for f in ns.manager.forks.of(session_id)]
        with own.releasing(session_id):  # a takeover of it waits for the block's end
            payload = {"type": "session_close", "session_id": session_id, "namespace": ns.key}
            with own.local(session_id):
                status, body = await self.pipeline.run(payload, None)
            moved = await self.forks.end_moved(ns.key, session_id, forks) if forks else 0
        new_owner = command.new_owner
        whom = f"node {new_owner!r} took it over" if new_owner else "its row was deleted"
        if status == 200 and body.get("ok"):
            own.releases += 1
            await own.drop_owed(session_id)
            data = body.get("data")
            log.info(
                "released session %r: %s (%s chunks evicted, %d forks moved with it)",
                session_id,
                whom,
                data.get("evicted_count") if isinstance(data, dict) else None,
                moved,
            )
            return True
        log.warning("releasing session %r (%s) failed: %s", session_id, whom, body.get("error"))
        return False


class CheckingOwners:
    """Handles :class:`CheckOwners`: one question to the database, then a
    :class:`ReleaseSession` per session lost and (a full check) a :class:`SettleOwed`,
    each sent through the bus (``dispatch``; immediate commands: a release must not wait
    in any lane)."""

    def __init__(self, ownership: Ownership, forks: MovedForks, dispatch: Dispatch) -> None:
        self.ownership = ownership
        self.forks = forks
        self.dispatch = dispatch

    async def __call__(self, command: CheckOwners, _uow: UnitOfWork) -> int:
        own = self.ownership
        if not own.shared:
            return 0
        only = None if command.only is None else set(command.only)
        if only is None:
            await self._end_orphan_forks()
        lost, owned = await own.lost(only)
        released = 0
        for sid, (seen, owner) in lost.items():
            if await self.dispatch(ReleaseSession(sid, seen, owner)):
                released += 1
        if only is None:
            await self.dispatch(SettleOwed(frozenset(owned)))
        return released

    async def _end_orphan_forks(self) -> None:
        """Forks held here whose parent is not and whose rows moved to another node: end
        them here (one query for all)."""
        orphans = self.ownership.orphan_forks()
        if orphans:
            store = self.ownership.shared_store
            owners = await store.fork_owners_of([f.fork_id for _, f in orphans])
            for key, f in orphans:
                await self.forks.end_here(key, f.session_id, f.fork_id, owners)


class SettlingOwed:
    """Handles :class:`SettleOwed`: the owed rows read, those due (ownership says which,
    and which of their chunks nothing here holds) settled in one store transaction that
    queues their evictions in this node's outbox, then handed to the dispatchers. One
    settlement at a time (start-up's and a full check's may overlap)."""

    def __init__(self, ownership: Ownership) -> None:
        self.ownership = ownership
        self.chunks = 0  # evictions queued from owed rows (sessions lost while away)
        self._settling = asyncio.Lock()

    async def __call__(self, command: SettleOwed, _uow: UnitOfWork) -> int:
        own = self.ownership
        if not own.shared or not own.started:  # the refcounts it reads are not loaded yet
            return 0
        store = own.shared_store
        async with self._settling:
            due = own.owed_due(await store.owed_releases(), set(command.owned))
            if not due:
                return 0
            free = own.free_chunks(due)
            committer = own.committer
            rows: list[OutboxRow] = []
            for key, hashes in free.items():
                entries = tuple((h, EvictMode.DELETE) for h in hashes)
                rows.append(OutboxRow(committer.next_row_id, key, entries))
                committer.next_row_id += 1
            await store.settle_owed(rows, [o.row_id for o in due])
        for row, key, entries in rows:
            own.namespaces[key].dispatcher.evictions_committed([h for h, _ in entries], [], row)
        count = sum(len(hashes) for hashes in free.values())
        self.chunks += count
        log.info(
            "settled %d owed releases (sessions lost while this node held them not): "
            "%d chunks nothing here references evicted",
            len(due),
            count,
        )
        return count


class AdoptingSessions:
    """Handles :class:`AdoptSession`: the session claimed for an event adopted here in one
    step, then committed through the unit of work."""

    def __init__(self, ownership: Ownership) -> None:
        self.ownership = ownership

    async def __call__(self, command: AdoptSession, uow: UnitOfWork) -> bool:
        adoption = self.ownership.adoption(command.claimed)
        if adoption is None:
            return False
        ns, change = adoption
        # Through the unit of work, in order with the changes applied before it: a failed
        # (or fenced) commit of those undoes their refcounts by value, and must undo this
        # adopt first, not put back counts from before it. Undone, the row stays this
        # node's and the event's retry claims it again (a claim returns an own row).
        await uow.commit(ns, change)
        self.ownership.took_over(command.claimed)
        return True


class OwnedFirst:
    """The pipeline's run for client events: what the takeover step asks for first, sent
    through the bus, then the event again; ownership thus never calls back into the
    pipeline, nor commits on its own. :class:`ReleaseFirst` (a copy held here to check
    against the database): a :class:`CheckOwners` (releasing the copy when another node
    owns it); :class:`AdoptFirst` (a session just claimed): an :class:`AdoptSession`. The
    event's fenced tries bound the checks and the adopts alike."""

    def __init__(self, pipeline: Pipeline, ownership: Ownership, dispatch: Dispatch) -> None:
        self.pipeline = pipeline
        self.ownership = ownership
        self.dispatch = dispatch

    async def run(self, payload: JsonObject, slot: AnswerSlot | None) -> Reply:
        """``pipeline.run(payload, slot)``, its stale copies released and its takeovers
        adopted first."""
        try:
            return await self.pipeline.run(payload, slot)  # the common case: none asked
        except (ReleaseFirst, AdoptFirst) as first:
            asked = first
        checks = adopts = 0
        marks: list[AbstractContextManager[None]]
        while True:
            if isinstance(asked, ReleaseFirst):
                checks += 1
                await self._check(asked)
                # The last try goes on from memory whatever its takeover step finds.
                marks = [self.ownership.checked(asked.session_id, last=checks >= FENCED_TRIES)]
            else:
                adopts += 1
                marks = await self._adopt(asked, adopts, checks >= FENCED_TRIES)
            if slot is not None:
                slot.stored = None  # what it stored (if anything) was rolled back
            try:
                with ExitStack() as stack:
                    for mark in marks:
                        stack.enter_context(mark)
                    return await self.pipeline.run(payload, slot)
            except (ReleaseFirst, AdoptFirst) as again:
                asked = again

    async def _check(self, asked: ReleaseFirst) -> None:
        sid = asked.session_id
        try:
            await self.dispatch(CheckOwners(frozenset((sid,))))
        except StoreError as err:  # still held: the event goes on (fenced, or 503)
            log.info("cannot check the owner of %r: %s", sid, err)
        if asked.stale:
            self.ownership.notices.stale.discard(sid)

    async def _adopt(
        self, first: AdoptFirst, adopts: int, checks_spent: bool
    ) -> list[AbstractContextManager[None]]:
        """The adopt sent (unless the adopts' bound is spent); what the next run of the
        event goes on under: checked (adopted just now), or the adopt's error raised by its
        takeover step (every time once the bound is spent: that run ends the event)."""
        own, sid = self.ownership, first.claimed.session.session_id
        err: StoreError
        if adopts > FENCED_TRIES:  # still moving: answered as a fenced write is
            err = StoreFenced([sid])
        else:
            try:
                await self.dispatch(AdoptSession(first.claimed))
            except StoreError as failed:
                err = failed
            else:
                return [own.checked(sid, last=checks_spent)]
        spent = adopts >= FENCED_TRIES
        marks: list[AbstractContextManager[None]] = [own.adopt_failed(sid, err, always=spent)]
        if spent or checks_spent:
            marks.append(own.checked(sid, last=True))
        return marks


class OwnerChecks:
    """What asks the bus for a :class:`CheckOwners`: the notices (a notification, a fence),
    the store's LISTEN reconnects and its periodic check (registered at construction)."""

    def __init__(self, ownership: Ownership, bus: MessageBus) -> None:
        self.ownership = ownership
        self.bus = bus
        self._checker: asyncio.Task[None] | None = None
        if ownership.shared:
            ownership.shared_store.on_reconnect(self.check_all, ownership.check_s)

    async def check_all(self) -> int:
        """Every held session checked (orphaned forks ended, owed rows settled)."""
        return await self.bus.handle(CheckOwners())

    async def _check_due(self) -> None:
        """Check what the notices hold against the database, whenever they get some."""
        notices = self.ownership.notices
        while True:
            await notices.wake.wait()
            notices.wake.clear()
            while notices.due:
                due = notices.take_due()
                try:
                    await self.bus.handle(CheckOwners(frozenset(due)))
                except Exception as err:  # the periodic check tries again
                    log.warning("checking %d notified sessions failed: %s", len(due), err)

    async def start(self) -> None:
        """After start-up's load: the notices' checker, and what this node owes for
        sessions taken from it or closed while it was down (a :class:`SettleOwed`; a
        failure waits for the next full check)."""
        own = self.ownership
        if own.shared:
            self._checker = asyncio.get_running_loop().create_task(
                self._check_due(), name="ownership-check"
            )
        own.start()
        if not own.shared:  # an embedded store has no other nodes: nothing is ever owed
            return
        try:
            await self.bus.handle(SettleOwed(frozenset(own.settled_sessions(None))))
        except StoreError as err:
            log.warning("settling owed releases at start-up failed: %s", err)

    async def close(self) -> None:
        if self._checker is not None:
            self._checker.cancel()
            self._checker = None
