"""Ownership's releases as commands: what the database says another node holds is closed here."""

from __future__ import annotations

import asyncio
import logging

from ramakv_daemon.bus.commands import CheckOwners, ReleaseSession
from ramakv_daemon.bus.messagebus import MessageBus
from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.ownership.ownership import Ownership, ReleaseFirst
from ramakv_daemon.pipeline.idempotency import AnswerSlot, Reply
from ramakv_daemon.pipeline.pipeline import FENCED_TRIES, Pipeline
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork
from ramakv_daemon.ports import StoreError

log = logging.getLogger("ramakv.ownership")


class ReleasingSessions:
    """Handles :class:`ReleaseSession`. The check that the session is untouched since the
    database was asked and its close's apply run in one loop step (the pipeline applies a
    ``local`` close in its first step, before any await): an event for the session in
    between would otherwise be closed away."""

    def __init__(self, ownership: Ownership, pipeline: Pipeline) -> None:
        self.ownership = ownership
        self.pipeline = pipeline

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
            moved = await self.end_moved_forks(ns.key, session_id, forks) if forks else 0
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

    async def end_moved_forks(self, key: str, session_id: str, fork_ids: list[int]) -> int:
        """End here the forks of ``session_id`` whose rows this node no longer owns (the
        takeover moved them); those still ours stay (an admin close leaves forks)."""
        owners = await self.ownership.shared_store.fork_owners_of(fork_ids)
        ended = [await self.end_fork_here(key, session_id, fid, owners) for fid in fork_ids]
        return sum(ended)

    async def end_fork_here(
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


class CheckingOwners:
    """Handles :class:`CheckOwners`: one question to the database, then a
    :class:`ReleaseSession` per session lost, handled in turn by its handler (this check's
    own work: a release must not wait in any lane)."""

    def __init__(self, ownership: Ownership, releasing: ReleasingSessions) -> None:
        self.ownership = ownership
        self.releasing = releasing

    async def __call__(self, command: CheckOwners, uow: UnitOfWork) -> int:
        own = self.ownership
        if not own.shared:
            return 0
        only = None if command.only is None else set(command.only)
        if only is None:
            await self._end_orphan_forks()
        lost, owned = await own.lost(only)
        released = 0
        for sid, (seen, owner) in lost.items():
            if await self.releasing(ReleaseSession(sid, seen, owner), uow):
                released += 1
        if only is None:
            await own.settle_owed(owned)
        return released

    async def _end_orphan_forks(self) -> None:
        """Forks held here whose parent is not and whose rows moved to another node: end
        them here (one query for all)."""
        orphans = self.ownership.orphan_forks()
        if orphans:
            store = self.ownership.shared_store
            owners = await store.fork_owners_of([f.fork_id for _, f in orphans])
            for key, f in orphans:
                await self.releasing.end_fork_here(key, f.session_id, f.fork_id, owners)


class ReleasedFirst:
    """The pipeline's run for client events: when the takeover step says a copy held here
    must be checked against the database first (:class:`ReleaseFirst`), the check runs
    (releasing the copy when another node owns it), then the event again; ownership thus
    never calls back into the pipeline. The event's fenced tries bound the checks."""

    def __init__(self, pipeline: Pipeline, check: CheckingOwners, uow: UnitOfWork) -> None:
        self.pipeline = pipeline
        self.check = check
        self.uow = uow

    async def run(self, payload: JsonObject, slot: AnswerSlot | None) -> Reply:
        """``pipeline.run(payload, slot)``, its stale copies released first."""
        own = self.check.ownership
        try:
            return await self.pipeline.run(payload, slot)
        except ReleaseFirst as first:
            asked = first
        for tries in range(FENCED_TRIES, 0, -1):
            sid = asked.session_id
            try:
                await self.check(CheckOwners(frozenset((sid,))), self.uow)
            except StoreError as err:  # still held: the event goes on (fenced, or 503)
                log.info("cannot check the owner of %r: %s", sid, err)
            if asked.stale:
                own.notices.stale.discard(sid)
            if slot is not None:
                slot.stored = None  # what it stored (if anything) was rolled back
            try:
                # The last try goes on from memory whatever its takeover step finds.
                with own.checked(sid, last=tries == 1):
                    return await self.pipeline.run(payload, slot)
            except ReleaseFirst as again:
                asked = again
        raise AssertionError("the last try never asks to release first")


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
        sessions taken from it or closed while it was down."""
        if self.ownership.shared:
            self._checker = asyncio.get_running_loop().create_task(
                self._check_due(), name="ownership-check"
            )
        await self.ownership.start()

    async def close(self) -> None:
        if self._checker is not None:
            self._checker.cancel()
            self._checker = None
