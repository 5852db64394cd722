"""Session ownership across nodes on a shared store: take over on an event, release what
the database says another node took or closed (docs/scale-out.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar

from ramakv_daemon.commit.committer import GroupCommitter
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session
from ramakv_daemon.ownership.notices import Notices
from ramakv_daemon.ports import (
    Claimed,
    OwedRelease,
    SessionStore,
    SharedSessionStore,
    StoreError,
)
from ramakv_daemon.routing.namespaces import Namespace, Namespaces

log = logging.getLogger("ramakv.ownership")

# The safety net's default period (config ownership_check_s): a release missed without the
# LISTEN connection dropping (one that failed, a lost notification) waits at most this long.
DEFAULT_CHECK_S = 30.0

# The session whose events this task runs for this node's own sake (a release's close and
# fork ends, a sweep's act): they act on the copy here and never take the session over.
_LOCAL: ContextVar[str | None] = ContextVar("ramakv_local_session", default=None)

# The session whose release check (or adopt) this task has just run (the bus, answering
# ReleaseFirst or AdoptFirst): the event's next takeover step goes on without asking
# again: once, or (its last try) every time.
_CHECKED: ContextVar[tuple[str, bool] | None] = ContextVar("ramakv_checked", default=None)

# The session whose adopt the bus could not commit, and why: the event's next takeover
# step fails with that error, as the adopt's own commit failed in it before the adopt was a
# command (a fenced one is applied again by the pipeline's fenced tries; else 503).
# ``always``: every takeover step of it in the block fails so (the adopts' bound is spent).
_ADOPT_FAILED: ContextVar[tuple[str, StoreError, bool] | None] = ContextVar(
    "ramakv_adopt_failed", default=None
)


class ReleaseFirst(Exception):
    """Raised by :meth:`Ownership.before` (never a store or event error: the pipeline lets
    it through) when the database must be asked about ``session_id`` and a stale copy
    released before the event applies: the bus runs that release check, then the event
    again (ownership never calls the pipeline). ``stale``: a fence or a refusal said the
    copy is stale (else: the LISTEN connection is down, a takeover may be unheard)."""

    def __init__(self, session_id: str, stale: bool) -> None:
        super().__init__(session_id)
        self.session_id = session_id
        self.stale = stale


class AdoptFirst(Exception):
    """Raised by :meth:`Ownership.before` once it has claimed ``claimed`` from the database
    for an event and the session is not held here: the bus adopts it (its AdoptSession
    command, committed through the unit of work), then runs the event again, which then
    applies on the adopted copy (ownership never commits on its own)."""

    def __init__(self, claimed: Claimed) -> None:
        super().__init__(claimed.session.session_id)
        self.claimed = claimed


class Ownership:
    """This node's side of the handover protocol; a no-op on a store without owners.

    Takeover: an event for a session not in memory claims it in the database (row lock;
    the store notifies the old owner at commit) with its open forks; the bus's AdoptSession
    command adopts both (:meth:`adoption`) before the event applies, so turn_start
    prefetches the map and the forks' holds move along.

    Release: the database decides, never a notification alone. A notification (another
    node took or closed a session of ours), a LISTEN reconnect (notifications sent while it
    was down are lost) and a periodic check each ask the store who owns the sessions this
    node holds (:meth:`lost`); one owned elsewhere or gone is closed here as a
    session_close would close it (its chunks drop here and are evicted or demoted), and its
    forks whose rows moved with it are ended here: the bus's ReleaseSession command does it
    (``ramakv_daemon.bus.ownership``), this object answers what it asks (:meth:`releasable`).
    A session an event touched since the question was asked, or one with a change still in
    doubt, is left alone: that change's commit takes it back (or, rolled back, the next
    check looks again).

    Fencing: every write of a session row is conditional on the version this node last
    read (the store's fenced write). A write that finds another version (a takeover this
    node has not heard of yet) writes nothing and is undone here; the committer tells its
    Fenced subscriber, :class:`~ramakv_daemon.ownership.notices.Notices`, which marks the
    copy stale and due for a check: the next event for it first releases it (:meth:`before`
    raises :class:`ReleaseFirst`; the bus asks the database, as above), then claims the
    row as stored and applies on that, never on the stale copy (the pipeline applies a
    fenced event again).

    Owed releases: whatever takes a session from this node records in that transaction
    what it owes its cache (the store's owed rows); a node that held nothing in memory then
    (down, restarted) settles them after start-up's load and on each full check, deleting
    the chunks nothing here references: the bus's SettleOwed command does it, this object
    answers which rows are due and which of their chunks are free (:meth:`owed_due`,
    :meth:`free_chunks`). A release from memory only drops the rows.
    """

    def __init__(
        self,
        store: SessionStore,
        namespaces: Namespaces,
        committer: GroupCommitter,
        notices: Notices | None = None,
    ) -> None:
        """``committer``: what is in doubt (and, for the bus's SettleOwed, the outbox rows'
        ids of settled owed rows);
        ``notices``: what the store and the committer (a fenced commit) tell this node's
        checker (the composition root gives the committer the same one)."""
        self.store = store
        self.namespaces = namespaces
        self.committer = committer
        self.notices = notices if notices is not None else Notices()
        self._shared = store if isinstance(store, SharedSessionStore) else None
        self.shared = self._shared is not None
        self.check_s = namespaces.config.ownership_check_s
        if self._shared is not None:
            self._shared.on_release(self.notices.notified)
        self.takeovers = 0
        self.releases = 0
        self.release_waits = 0  # takeovers that waited for this node's release to commit
        # session id -> the release under way (close and fork ends committed): a takeover
        # of that session waits for it, or its commit could delete the row just claimed.
        self._releasing: dict[str, asyncio.Future[None]] = {}
        self.started = False  # owed rows wait for start-up's load (its refcounts)

    @staticmethod
    @contextlib.contextmanager
    def local(session_id: str) -> Iterator[None]:
        """Within the block, events for ``session_id`` run by this task act on this node's
        copy only: they never take the session over nor wait for its release (what a
        release runs itself, and what a sweep acting on its own sessions wants). Their
        writes are fenced all the same: a copy another node changed is refused."""
        token = _LOCAL.set(session_id)
        try:
            yield
        finally:
            _LOCAL.reset(token)

    @staticmethod
    @contextlib.contextmanager
    def checked(session_id: str, last: bool = False) -> Iterator[None]:
        """Within the block, the next takeover step for ``session_id`` in this task goes on
        without raising :class:`ReleaseFirst` (its release check has just run): once (a
        later fence of the event asks again), or every time when ``last``."""
        token = _CHECKED.set((session_id, last))
        try:
            yield
        finally:
            _CHECKED.reset(token)

    @staticmethod
    @contextlib.contextmanager
    def adopt_failed(session_id: str, err: StoreError, always: bool = False) -> Iterator[None]:
        """Within the block, the next takeover step for ``session_id`` in this task (every
        one when ``always``) raises ``err``: the adopt the bus ran for the event failed."""
        token = _ADOPT_FAILED.set((session_id, err, always))
        try:
            yield
        finally:
            _ADOPT_FAILED.reset(token)

    @property
    def shared_store(self) -> SharedSessionStore:
        """The store as a shared one (only called where ``shared`` is True)."""
        assert self._shared is not None, "not a shared store"
        return self._shared

    async def fork_id(self, wanted: bool) -> int | None:
        """On a shared store, the id of the fork an event opens (``wanted``: its spec's
        store_fork_id) from the store (unique across daemons); None where this daemon's
        own counter is the only one (StoreError: nothing done)."""
        if not self.shared or not wanted:
            return None
        return await self.shared_store.take_fork_id()

    # ---- takeover ----------------------------------------------------------------------
    def _in_memory(self, session_id: str) -> bool:
        return any(session_id in m.sessions for m in self.namespaces.managers.values())

    async def before(
        self, takes_over: bool, session_id: str | None, fork_id: object = None
    ) -> None:
        """Take ``session_id`` over when another node owns it and the event acts on it
        (``takes_over``: its spec says so; reads such as session_map answer from this
        node's memory and never move a session). StoreError: nothing done. ``fork_id``:
        the fork a session_fork_end names, if any. ReleaseFirst: a copy held here must be
        checked against the database (and released) first; the bus does, then runs the
        event again. AdoptFirst: claimed here, to be adopted; the bus's AdoptSession does
        it, then runs the event again (the adopt's error, when it fails: :meth:`adopt_failed`).

        Returns without awaiting when the session is here and the LISTEN connection is up
        (and a named fork is here too): the event then applies in the same step."""
        if not self.shared or not session_id or not takes_over or _LOCAL.get() == session_id:
            return
        mark = _CHECKED.get()
        checked = mark is not None and mark[0] == session_id
        if checked and not (mark is not None and mark[1]):
            _CHECKED.set(None)  # once: a later fence of this event asks again
        if not checked and session_id in self.notices.stale:
            raise ReleaseFirst(session_id, stale=True)
        releasing = self._releasing.get(session_id)
        if self._in_memory(session_id) and releasing is None:
            if checked:
                pass  # checked just now: still held (in doubt, the store away), go on
            elif not self._listening():
                # A takeover may have gone unheard: the database first, so the event
                # acts on the new owner's row (claimed back below), not the stale copy.
                raise ReleaseFirst(session_id, stale=False)
            elif await self._fork_elsewhere(fork_id):
                # Opened on another node since this copy was taken: the copy is stale,
                # and ending nothing here writes nothing a fence would refuse.
                raise ReleaseFirst(session_id, stale=True)
            else:
                return  # any notification would have come
        elif releasing is not None:  # (its own events run local(): they never get here)
            self.release_waits += 1
            log.info("an event for %r waits for its release to commit first", session_id)
            await asyncio.shield(releasing)
        if self.namespaces.owner(session_id) is not None:
            return
        failed = _ADOPT_FAILED.get()
        if failed is not None and failed[0] == session_id:
            if not failed[2]:
                _ADOPT_FAILED.set(None)  # once: a fenced retry claims and adopts again
            raise failed[1]
        claimed = await self.shared_store.claim(session_id)
        if claimed is None:
            return
        if self.namespaces.owner(session_id) is not None:  # an event adopted it meanwhile
            return
        raise AdoptFirst(claimed)  # no await since the claim: the bus adopts it at once

    def adoption(self, claimed: Claimed) -> tuple[Namespace, Change] | None:
        """The adopt of a session just claimed, applied (synchronously: no event comes in
        between), for the bus's AdoptSession to commit: its namespace and change; None when
        an event adopted it meanwhile."""
        session = claimed.session
        if self.namespaces.owner(session.session_id) is not None:
            return None
        ns = self.namespaces.add(session.namespace)
        # Forks held here already (an own row's, kept in memory) are not adopted twice.
        forks = [f for f in claimed.forks if f.fork_id not in ns.manager.forks]
        return ns, ns.manager.adopt(session, forks)

    def took_over(self, claimed: Claimed) -> None:
        """An adopt committed: counted and logged (a takeover from another node)."""
        session_id = claimed.session.session_id
        if claimed.previous_owner == self.shared_store.node_id:
            log.info("took back session %r (this node's row, not held here)", session_id)
            return
        self.takeovers += 1
        log.info(
            "took over session %r from node %r (%d chunks, %d open forks)",
            session_id,
            claimed.previous_owner,
            len(claimed.session.unique_hashes()),
            len(claimed.forks),
        )

    async def stale_copy(self, session_id: str | None) -> bool:
        """An event that acts on ``session_id`` wrote no row of it here: refused
        (suspended, not found, ...) or a no-op (a suspend of a suspended copy). Nothing
        was written, so no fence can tell it came from a stale copy: True when the stored
        row is not the version this node read (marked stale: the event is applied again
        after the release and claim). One query, only for such events."""
        if not self.shared or not session_id or _LOCAL.get() == session_id:
            return False
        store = self.shared_store
        try:
            stored = (await store.stored_versions([session_id])).get(session_id)
        except StoreError:
            return False
        if stored == store.version(session_id):
            return False
        log.info("a refusal of %r came from a stale copy: applied again", session_id)
        self.notices.stale.add(session_id)
        return True

    async def _fork_elsewhere(self, fork_id: object) -> bool:
        """True when ``fork_id`` (an id a fork_end names) is not held here but another
        node holds its row (one query, only for an id unknown here)."""
        if not isinstance(fork_id, int) or isinstance(fork_id, bool):
            return False
        if any(fork_id in m.forks for m in self.namespaces.managers.values()):
            return False
        holder = (await self.shared_store.fork_owners_of([fork_id])).get(fork_id)
        return holder is not None and holder != self.shared_store.node_id

    def _listening(self) -> bool:
        listener = getattr(self.store, "listener", None)
        return listener is None or bool(listener.connected)

    # ---- release (the bus's ReleaseSession asks these) ----------------------------------
    def in_doubt(self, ns: Namespace) -> set[str]:
        """Sessions of ``ns`` an applied change not yet committed (or rolled back) moved."""
        pending = self.committer.uncommitted(ns.key)
        return {sid for c in pending for sid in c.prev_sessions}

    def settled_sessions(self, only: set[str] | None) -> dict[str, Session]:
        """Sessions held here (those of ``only`` when given) with no change in doubt, as
        they are now: a later event replaces the object, which the release then sees."""
        out: dict[str, Session] = {}
        for ns in self.namespaces:
            doubt = self.in_doubt(ns)
            sessions = ns.manager.sessions
            ids = sessions if only is None else [sid for sid in only if sid in sessions]
            out.update((sid, sessions[sid]) for sid in ids if sid not in doubt)
        return out

    async def lost(
        self, only: set[str] | None
    ) -> tuple[dict[str, tuple[Session, str | None]], set[str]]:
        """Held sessions (of ``only`` when given) the database says another node owns or
        nobody does: id -> (the session as it was when asked, its new owner); and those
        it says this node owns (StoreError: nothing known)."""
        held = self.settled_sessions(only)
        owners = await self.shared_store.owners(list(held)) if held else {}
        node = self.shared_store.node_id
        lost = {sid: (s, owners.get(sid)) for sid, s in held.items() if owners.get(sid) != node}
        return lost, {sid for sid in held if owners.get(sid) == node}

    def releasable(self, session_id: str, seen: Session) -> Namespace | None:
        """The namespace of ``session_id`` when it may be released now: still the object
        ``seen`` (no event since the database was asked), nothing about it in doubt, and
        no release of it under way; else None. Synchronous: the release applies its close
        in this same step."""
        if session_id in self._releasing:
            return None
        key = self.namespaces.owner(session_id)
        if key is None:
            return None
        ns = self.namespaces[key]
        if ns.manager.sessions.get(session_id) is not seen or session_id in self.in_doubt(ns):
            return None
        return ns

    @contextlib.contextmanager
    def releasing(self, session_id: str) -> Iterator[None]:
        """Marks the release of ``session_id`` under way for the block (a takeover of it
        waits for the block's end), its row disowned: the close must not delete it (or be
        fenced), it is not this node's any more."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._releasing[session_id] = done
        self.shared_store.disown([session_id])
        try:
            yield
        finally:
            del self._releasing[session_id]
            done.set_result(None)

    def orphan_forks(self) -> list[tuple[str, Fork]]:
        """Forks held here whose parent is not (closed, or a release stopped before its
        forks) nor being released: (namespace, fork)."""
        return [
            (ns.key, f)
            for ns in self.namespaces
            for f in ns.manager.forks.values()
            if f.session_id not in ns.manager.sessions and f.session_id not in self._releasing
        ]

    async def drop_owed(self, session_id: str) -> None:
        """Released from memory (its refcounts dropped here, its evictions queued): its
        owed rows are done. Kept when the session is back meanwhile (a later settle sees
        it owned) or the delete fails: settling a row again only repeats evictions of
        chunks nothing here references, never a refcount."""
        if self._in_memory(session_id):
            return
        try:
            await self.shared_store.drop_owed([session_id])
        except StoreError as err:
            log.info("owed rows of %r stay (settled later): %s", session_id, err)

    def start(self) -> None:
        """After start-up's load: owed rows may be settled from now on (their refcounts
        are loaded); the bus's SettleOwed settles them."""
        self.started = True

    def owed_due(self, owed: list[OwedRelease], owned: set[str]) -> list[OwedRelease]:
        """The rows of ``owed`` to settle now: of sessions this node does not hold, or holds
        as their owner again (``owned``: the database said so); a held session lost or in
        doubt, or being released, is left to its release from memory."""
        return [o for o in owed if self._owes(o, owned)]

    def _owes(self, owed: OwedRelease, owned: set[str]) -> bool:
        sid = owed.session_id
        if sid in self._releasing:
            return False
        return not self._in_memory(sid) or sid in owned

    def free_chunks(self, due: list[OwedRelease]) -> dict[str, list[str]]:
        """namespace -> the owed chunks no session, fork or parked map here holds now (the
        dispatcher checks each again as its evict is written)."""
        out: dict[str, dict[str, None]] = {}
        for o in due:
            manager = self.namespaces.add(o.namespace).manager
            held, parked = manager.refcounts, manager.parked
            chunks = out.setdefault(o.namespace, {})
            chunks.update((h, None) for h in o.hashes if h not in held and h not in parked)
        return {key: list(hashes) for key, hashes in out.items() if hashes}

    def status(self) -> dict[str, object]:
        """For /metrics: whether the store is reachable, and the handover counters."""
        if not self.shared:  # an embedded store is there while the daemon is
            return {"connected": True, "reconnects": 0, "takeovers": 0, "releases": 0}
        listener = getattr(self.store, "listener", None)
        return {
            "connected": bool(getattr(self.store, "connected", True)),
            "reconnects": getattr(listener, "reconnects", 0) if listener else 0,
            "takeovers": self.takeovers,
            "releases": self.releases,
        }
