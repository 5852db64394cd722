"""The evictions waiting for delivery, by chunk, and the stored outbox rows that hold them."""

from __future__ import annotations

import asyncio
import heapq
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import NamedTuple

from ramakv_daemon.ports import EvictMode


class Intent(NamedTuple):
    """One chunk's queued eviction.

    Attributes:
        mode: how it leaves the cache.
        version: tells a re-queued intent from a delivered one (increasing).
        row: the stored outbox row that holds it (0: none, best effort).
    """

    mode: EvictMode
    version: int
    row: int


class Outbox:
    """Queued intents (hash -> :class:`Intent`), which of them are due, and the rows.

    A stored row is deleted (``forget_rows``) once none of its entries waits any more:
    delivered, replaced by a newer intent, or dropped because the chunk is referenced
    again. A delivery a deferring cache may still act on keeps its rows until it settles,
    so a restart meanwhile sends it again instead of forgetting a delete still pending.
    """

    def __init__(self, forget_rows: Callable[[list[int]], None], wake: asyncio.Event) -> None:
        """``wake``: set whenever something became due (the delivery loop waits on it)."""
        self.forget_rows = forget_rows
        self.wake = wake
        self.entries: dict[str, Intent] = {}
        self._row_live: dict[int, int] = {}  # row -> entries of it still waiting
        self._rows_done: list[int] = []
        # Hashes due for delivery, in order; re-checks of chunks referenced again while
        # a commit was in flight, as a heap of (not before, version, hash).
        self.ready: dict[str, None] = {}
        self.later: list[tuple[float, int, str]] = []
        self._version = 0
        self.repeat: set[str] = set()  # may have been delivered before (restart, failure)
        # (time, row -> entries) of deliveries a deferring cache may still act on.
        self.settling: deque[tuple[float, dict[int, int]]] = deque()

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, chunk_hash: object) -> bool:
        return chunk_hash in self.entries

    def add(
        self, delete: Sequence[str], demote: Sequence[str], row: int = 0, cold: Sequence[str] = ()
    ) -> None:
        """Queue evictions whose outbox row ``row`` is durable now (hot path: kept inline).

        One :class:`Intent` per mode, shared by its hashes (an object per hash cost more
        than the rest of the queueing): its version tells it from any earlier or later
        intent of the same chunk as well as one per hash would."""
        if not (delete or demote or cold):
            return
        outbox, v = self.entries, self._version
        queued: dict[str, Intent] = {}
        listed = 0
        for mode, hashes in (
            (EvictMode.DELETE, delete),
            (EvictMode.DEMOTE, demote),
            (EvictMode.COLD, cold),
        ):
            if hashes:
                v += 1
                queued.update(dict.fromkeys(hashes, Intent(mode, v, row)))
                listed += len(hashes)
        # A chunk listed twice replaces its own first entry: its row counts both.
        replaced = [row] * (listed - len(queued))
        if outbox and not outbox.keys().isdisjoint(queued.keys()):
            # The older intents' rows no longer need these entries.
            replaced.extend(e.row for e in map(outbox.get, queued) if e is not None)
        outbox.update(queued)
        self.ready.update(dict.fromkeys(queued))
        self._version = v
        self._row_live[row] = self._row_live.get(row, 0) + listed
        for old_row in replaced:
            self.release_row(old_row)
        self.flush_rows()
        self.wake.set()

    def row_done(self, row: int) -> None:
        """A loaded row none of whose entries waits (all unknown or empty)."""
        self._rows_done.append(row)

    def release_row(self, row: int, entries: int = 1) -> None:
        left = self._row_live.get(row, 0) - entries
        if left > 0:
            self._row_live[row] = left
        else:
            self._row_live.pop(row, None)
            self._rows_done.append(row)

    def flush_rows(self) -> None:
        """Hand the rows no entry waits for to ``forget_rows``."""
        if self._rows_done:
            self.forget_rows(self._rows_done)
            self._rows_done = []

    def next_due_in(self, now: float, paused_until: float) -> float | None:
        """Seconds until something is due (None: nothing queued)."""
        waits = []
        if self.ready:
            waits.append(paused_until - now)
        if self.settling:
            waits.append(self.settling[0][0] - now)
        if self.later:
            # The heap may hold stale entries (delivered or re-queued since): waking for
            # one early only costs a pop.
            waits.append(self.later[0][0] - now)
        return max(0.0, min(waits)) if waits else None

    def promote(self, now: float) -> None:
        """Move entries whose wait is over from the heap to the ready set."""
        later, outbox, ready = self.later, self.entries, self.ready
        while later and later[0][0] <= now:
            _, version, h = heapq.heappop(later)
            entry = outbox.get(h)
            if entry is not None and entry.version == version:
                ready[h] = None

    def wait(self, h: str, until: float) -> None:
        """Look at ``h`` again at ``until`` (its release may yet be rolled back)."""
        entry = self.entries.get(h)
        if entry is not None:
            heapq.heappush(self.later, (until, entry.version, h))

    def take_ready(self) -> list[str]:
        """The due hashes still queued, in order; the ready set is emptied."""
        outbox = self.entries
        due = [h for h in self.ready if h in outbox]
        self.ready = {}
        return due

    def requeue(self, first: Iterable[list[str]], last: list[str]) -> None:
        """Due again: ``first`` ahead of the intents queued meanwhile, ``last`` behind."""
        outbox = self.entries
        ahead = {h: None for batch in first for h in batch if h in outbox}
        self.ready = {**ahead, **self.ready, **{h: None for h in last if h in outbox}}

    def forget_all(self, hashes: list[str], settle_at: float | None = None) -> None:
        """Drop delivered (or re-referenced) entries; release their rows in one count each
        (at ``settle_at`` when the cache may still act on them until then)."""
        if self.repeat:
            self.repeat.difference_update(hashes)
        popped = list(map(self.entries.pop, hashes, repeat(None)))
        rows: dict[int, int] = {}
        # Usually one intent (shared by the chunks queued together): one row, counted in C.
        if popped and popped[0] is not None and popped.count(popped[0]) == len(popped):
            rows[popped[0].row] = len(popped)
        else:
            for e in popped:
                if e is not None:
                    rows[e.row] = rows.get(e.row, 0) + 1
        if settle_at is not None and rows:
            self.settling.append((settle_at, rows))
            self.wake.set()
            return
        for row, k in rows.items():
            self.release_row(row, k)

    def settle(self, now: float) -> None:
        """Release the rows of deliveries whose deferral is over."""
        settling = self.settling
        while settling and settling[0][0] <= now:
            for row, k in settling.popleft()[1].items():
                self.release_row(row, k)
        self.flush_rows()
