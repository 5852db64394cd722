"""Commits held for a keep: a change waiting for the cache's answer waits alone, with only
the changes that depend on it; every other change commits past it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from ramakv_daemon.core.change import Change


class Queued(Protocol):
    """What the committer queues: an applied change (None: an answer alone, or outbox
    rows to delete), its namespace's keys, and the keep it must wait for."""

    @property
    def change(self) -> Change | None: ...

    @property
    def gate(self) -> asyncio.Future[None] | None: ...


Q = TypeVar("Q", bound=Queued)


class _Keys:
    """The rows and refcounts a set of changes touched: sessions, forks, (namespace, hash)."""

    __slots__ = ("forks", "hashes", "sessions")

    def __init__(self) -> None:
        self.sessions: set[str] = set()
        self.forks: set[int] = set()
        self.hashes: set[tuple[str, str]] = set()

    def add(self, c: Change) -> None:
        self.sessions.update(c.prev_sessions)
        self.forks.update(c.prev_forks)
        ns = c.namespace
        self.hashes.update((ns, h) for h in c.prev_counts)
        self.hashes.update((ns, h) for h in c.prev_parked)

    def touch(self, c: Change) -> bool:
        """True when ``c`` touched any of these keys."""
        sessions, forks, hashes, ns = self.sessions, self.forks, self.hashes, c.namespace
        return (
            any(s in sessions for s in c.prev_sessions)
            or any(f in forks for f in c.prev_forks)
            or any((ns, h) in hashes for h in c.prev_counts)
            or any((ns, h) in hashes for h in c.prev_parked)
        )


class Holding(Generic[Q]):
    """The queued writes that may not commit yet, oldest first.

    A write is held while its keep is unanswered (its ``gate``), or when it touches a
    session, fork or chunk refcount that an older held write touched: it was applied on
    top of that write, so committing it first would acknowledge a state that the older
    write's rollback would take back (and the undo of the older one, which puts back the
    values it saw, would be wrong). Every other write commits at once. Order within one
    session is kept: its later changes touch its row, so they wait behind it.
    """

    def __init__(self) -> None:
        self.items: list[Q] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def admit(self, queue: Iterable[Q]) -> list[Q]:
        """The writes that commit now, in apply order: ``queue`` (newer than every held
        write) after the held writes released; the rest stay held."""
        queue = list(queue)
        if not self.items and not any(_waits(q) for q in queue):
            return queue  # nothing waits: the common case, no keys built
        ready: list[Q] = []
        held: list[Q] = []
        keys = _Keys()
        for q in (*self.items, *queue):
            c = q.change
            if _waits(q) or (c is not None and keys.touch(c)):
                held.append(q)
                if c is not None:
                    keys.add(c)
            else:
                ready.append(q)
        self.items = held
        return ready

    def take(self) -> list[Q]:
        """Every held write, oldest first; none stays held (a failed commit undoes them)."""
        items, self.items = self.items, []
        return items


def watch(gate: asyncio.Future[None], wake: Callable[[], None], give_up_s: float) -> None:
    """Call ``wake`` when ``gate`` is done; cancel it after ``give_up_s`` (a hang guard:
    the dispatcher resolves it at the evict's deadline at the latest)."""
    timer = asyncio.get_running_loop().call_later(give_up_s, gate.cancel)

    def done(_: asyncio.Future[None]) -> None:
        timer.cancel()
        wake()

    gate.add_done_callback(done)


def _waits(q: Queued) -> bool:
    gate = q.gate
    return gate is not None and not gate.done()
