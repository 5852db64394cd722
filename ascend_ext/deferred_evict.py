"""Deferred evictions with generations: a delete waits a moment, and a keep cancels it."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Kept generations remembered (per hash, newest first out): they only have to outlive the
# evicts still on their way, which a timeout bounds; 64k entries is far more than that.
KEPT_MAX = 65536
MAX_DEFER_S = 60.0


@dataclass(slots=True)
class Pending:
    """One deferred eviction of one chunk."""

    generation: int
    locations: list[str] | None
    due: float


class DeferredEvictions:
    """The memory API's side of the daemon's eviction window (docs/reliability.md).

    The daemon decides an eviction when a chunk's refcount reaches 0, but the engine acts
    later; a chunk referenced again in between must not go. So an evict carrying
    ``defer_s`` is held that long, and the daemon sends ``keep`` for every chunk that is
    referenced again meanwhile: a keep with a newer generation cancels the pending delete
    and is remembered, so an older evict arriving late (a retry, a delivery repeated after
    a restart, a request a hung server processes late) is refused for that chunk instead of
    deleting it. Thread-safe; the clock is injectable for tests.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, kept_max: int = KEPT_MAX):
        self.clock = clock
        self.kept_max = kept_max
        self.pending: dict[str, Pending] = {}
        self.kept: OrderedDict[str, int] = OrderedDict()
        # Deletes carried out, hash -> generation (bounded like ``kept``): a keep that comes
        # after its chunk's delete ran learns it was too late ("late"), so the daemon knows.
        self.done: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def add(
        self,
        hashes: Sequence[str],
        locations: list[str] | None,
        generation: int | None,
        defer_s: float,
    ) -> tuple[list[str], int, list[str]]:
        """Register an evict: (hashes to remove now, number deferred, hashes refused as
        stale because a newer keep was seen)."""
        now_list: list[str] = []
        stale: list[str] = []
        deferred = 0
        with self._lock:
            due = self.clock() + defer_s
            for h in hashes:
                kept = self.kept.get(h)
                if generation is not None and kept is not None and kept >= generation:
                    stale.append(h)
                    continue
                if defer_s <= 0:
                    now_list.append(h)
                    if generation is not None:
                        self._remember(self.done, h, generation)
                    continue
                old = self.pending.get(h)
                if old is None or generation is None or old.generation <= generation:
                    self.pending[h] = Pending(generation or 0, locations, due)
                deferred += 1
        return now_list, deferred, stale

    def keep(self, hashes: Sequence[str], generation: int) -> tuple[int, list[str]]:
        """Cancel pending deletes older than ``generation``: (how many were cancelled, the
        hashes whose older delete had already been carried out — too late for them)."""
        cancelled = 0
        late: list[str] = []
        with self._lock:
            for h in hashes:
                p = self.pending.get(h)
                if p is not None and p.generation < generation:
                    del self.pending[h]
                    cancelled += 1
                ran = self.done.get(h)
                if ran is not None and ran < generation:
                    late.append(h)
                    del self.done[h]  # told once; the chunk is gone, a new store is new
                if self.kept.get(h, -1) < generation:
                    self._remember(self.kept, h, generation)
        return cancelled, late

    def _remember(self, table: OrderedDict[str, int], h: str, generation: int) -> None:
        table[h] = generation
        table.move_to_end(h)
        while len(table) > self.kept_max:
            table.popitem(last=False)

    def take_due(self) -> list[tuple[list[str] | None, list[str]]]:
        """Pop every pending delete whose time has come, grouped by tier list."""
        now = self.clock()
        groups: dict[tuple[str, ...] | None, list[str]] = {}
        with self._lock:
            for h, p in list(self.pending.items()):
                if p.due <= now:
                    del self.pending[h]
                    self._remember(self.done, h, p.generation)
                    key = tuple(p.locations) if p.locations is not None else None
                    groups.setdefault(key, []).append(h)
        return [(list(k) if k is not None else None, hs) for k, hs in groups.items()]

    def next_due(self) -> float | None:
        """When the earliest pending delete is due (clock time), or None."""
        with self._lock:
            return min((p.due for p in self.pending.values()), default=None)


def parse_generation(body: dict) -> int | None:
    """Optional ``generation``: a non-negative integer (the daemon's clock in ns)."""
    from ascend_ext.memory_ops import RequestError

    value = body.get("generation")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RequestError("field 'generation' must be a non-negative integer")
    return value


def parse_defer(body: dict) -> float:
    """Optional ``defer_s``: seconds to hold the delete, 0..60 (absent: 0, act now)."""
    from ascend_ext.memory_ops import RequestError

    value = body.get("defer_s", 0)
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not (0 <= value <= MAX_DEFER_S)
    ):
        raise RequestError(f"field 'defer_s' must be a number from 0 to {MAX_DEFER_S:g}")
    return float(value)
