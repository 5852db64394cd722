"""Commits held for a keep: a change waiting for the cache's answer waits alone, with only
the changes that depend on it; every other change commits past it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from ramakv_daemon.core.change import Change

Q = TypeVar("Q")  # a queued write: an applied change, an answer alone, outbox rows


class _Keys:
    """The rows and refcounts a set of changes touched: sessions, forks, (namespace, hash)."""

    __slots__ = ("forks", "hashes", "sessions")

    def __init__(self) -> None:
        self.sessions: set[str] = set()
        self.forks: set[int] = set()
        self.hashes: set[tuple[str, str]] = set()

    def add(self, ns: str, c: Change) -> None:
        self.sessions.update(c.prev_sessions)
        self.forks.update(c.prev_forks)
        self.hashes.update((ns, h) for h in c.prev_counts)
        self.hashes.update((ns, h) for h in c.prev_parked)

    def touch(self, ns: str, c: Change) -> bool:
        """True when ``c`` (applied in namespace ``ns``) touched any of these keys."""
        sessions, forks, hashes = self.sessions, self.forks, self.hashes
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

    def __init__(
        self,
        change_of: Callable[[Q], tuple[str, Change] | None],
        gate_of: Callable[[Q], asyncio.Future[None] | None],
    ) -> None:
        """``change_of(q)``: the namespace and applied change a queued write carries (None:
        an answer alone, outbox rows to delete); ``gate_of(q)``: the keep it must wait for."""
        self.change_of = change_of
        self.gate_of = gate_of
        self.items: list[Q] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def admit(self, queue: Iterable[Q]) -> list[Q]:
        """The writes that commit now, in apply order: ``queue`` (newer than every held
        write) after the held writes released; the rest stay held."""
        queue = list(queue)
        waits = self._waits
        if not self.items and not any(waits(q) for q in queue):
            return queue  # nothing waits: the common case, no keys built
        ready: list[Q] = []
        held: list[Q] = []
        keys = _Keys()
        for q in (*self.items, *queue):
            c = self.change_of(q)
            if waits(q) or (c is not None and keys.touch(*c)):
                held.append(q)
                if c is not None:
                    keys.add(*c)
            else:
                ready.append(q)
        self.items = held
        return ready

    def _waits(self, q: Q) -> bool:
        gate = self.gate_of(q)
        return gate is not None and not gate.done()

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
