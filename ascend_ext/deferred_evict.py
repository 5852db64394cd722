"""Deferred evictions with generations and deadlines: a delete waits, a keep cancels it."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ascend_ext.request_error import RequestError

# Kept generations remembered (per hash, oldest out first). One pushed out raises a floor
# instead of being forgotten: an evict at or below the floor is refused (the safe side).
KEPT_MAX = 65536
MAX_DEFER_S = 60.0
# How long a keep waits for a removal it meets already under way (it answers "late" only
# once the chunk is gone, so the daemon commits the new reference after the delete).
REMOVAL_WAIT_S = 30.0


@dataclass(slots=True)
class Pending:
    """One deferred eviction of one chunk."""

    generation: int
    locations: list[str] | None
    due: float
    not_after: int | None  # wall clock ns: never carried out later (None: no deadline)


@dataclass(slots=True)
class Added:
    """What an evict request became: chunks due at once (claim them, then remove), how
    many wait out their deferral, and those refused (a newer keep seen; deadline past)."""

    now: list[str] = field(default_factory=list)
    deferred: int = 0
    stale: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)


class DeferredEvictions:
    """The memory API's side of the daemon's eviction window (docs/reliability.md).

    The daemon decides an eviction when a chunk's refcount reaches 0, but the engine acts
    later; a chunk referenced again in between must not go. An evict carries the daemon's
    ``generation`` (its wall clock in ns), ``defer_s`` and ``not_after`` (wall clock ns): it
    is held ``defer_s``, then carried out only if no keep of a newer generation came and
    the deadline has not passed — past it the delete is dropped (the chunk stays; the LRU
    has it). A keep cancels older pending deletes and is remembered, so an older evict
    arriving late is refused as stale. Removal is claimed (:meth:`claim`) right before it
    runs and a keep meeting a claimed chunk waits until it is gone, so "late" is only ever
    answered after the delete. With these, the daemon knows that after ``not_after`` an
    evict can no longer act, whether or not its keep got through: it commits a new
    reference only after the keep's answer or that deadline. Thread-safe; the clocks are
    injectable for tests.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        kept_max: int = KEPT_MAX,
        wall: Callable[[], int] = time.time_ns,
    ):
        self.clock = clock
        self.wall = wall
        self.kept_max = kept_max
        self.pending: dict[str, Pending] = {}
        self.kept: OrderedDict[str, int] = OrderedDict()
        self.kept_floor = 0  # the newest kept generation pushed out of ``kept``
        # Deletes carried out, hash -> generation (bounded like ``kept``): a keep that comes
        # after its chunk's delete ran learns it was too late ("late"), so the daemon knows.
        self.done: OrderedDict[str, int] = OrderedDict()
        self.removing: dict[str, int] = {}  # claimed, removal under way
        self.expired = 0  # deletes dropped at their deadline
        self._cond = threading.Condition()

    def add(
        self,
        hashes: Sequence[str],
        locations: list[str] | None,
        generation: int | None,
        defer_s: float,
        not_after: int | None = None,
    ) -> Added:
        """Register an evict (every chunk not refused becomes pending; ``now`` lists
        those due at once, to claim and remove)."""
        out = Added()
        with self._cond:
            now = self.clock()
            if not_after is not None and self.wall() > not_after:
                out.expired = list(hashes)
                self.expired += len(hashes)
                return out
            due = now + max(defer_s, 0.0)
            for h in hashes:
                if generation is not None and (
                    generation <= self.kept_floor or self.kept.get(h, -1) >= generation
                ):
                    out.stale.append(h)
                    continue
                old = self.pending.get(h)
                if old is None or generation is None or old.generation <= generation:
                    self.pending[h] = Pending(generation or 0, locations, due, not_after)
                    self.done.pop(h, None)  # an earlier delete of it is no news any more
                if defer_s <= 0:
                    out.now.append(h)
                else:
                    out.deferred += 1
        return out

    def keep(self, hashes: Sequence[str], generation: int) -> tuple[int, list[str]]:
        """Cancel pending deletes older than ``generation``: (how many were cancelled, the
        hashes whose older delete had already been carried out — too late for them). A
        removal under way is waited for first."""
        cancelled = 0
        late: list[str] = []
        wanted = set(hashes)
        with self._cond:
            if not self._cond.wait_for(lambda: wanted.isdisjoint(self.removing), REMOVAL_WAIT_S):
                raise TimeoutError("a removal of some of these chunks is still under way")
            for h in hashes:
                p = self.pending.get(h)
                if p is not None and p.generation < generation:
                    del self.pending[h]
                    cancelled += 1
                ran = self.done.get(h)
                if ran is not None and ran < generation:
                    # Said again to every later keep (an answer may be lost with its
                    # connection) until a newer evict of the chunk replaces the entry.
                    late.append(h)
                if self.kept.get(h, -1) < generation:
                    self._remember_kept(h, generation)
        return cancelled, late

    def _remember_kept(self, h: str, generation: int) -> None:
        kept = self.kept
        kept[h] = generation
        kept.move_to_end(h)
        while len(kept) > self.kept_max:
            _, gen = kept.popitem(last=False)
            self.kept_floor = max(self.kept_floor, gen)

    def _remember_done(self, h: str, generation: int) -> None:
        done = self.done
        done[h] = generation
        done.move_to_end(h)
        while len(done) > self.kept_max:
            done.popitem(last=False)  # only a "late" answer is lost: reporting, not safety

    def due(self, now: float | None = None) -> list[tuple[list[str] | None, list[str]]]:
        """Pending deletes whose time has come (not taken yet: :meth:`claim` them right
        before removing), grouped by tier list."""
        at = self.clock() if now is None else now
        groups: dict[tuple[str, ...] | None, list[str]] = {}
        with self._cond:
            for h, p in self.pending.items():
                if p.due <= at:
                    key = tuple(p.locations) if p.locations is not None else None
                    groups.setdefault(key, []).append(h)
        return [(list(k) if k is not None else None, hs) for k, hs in groups.items()]

    def claim(self, hashes: Sequence[str], now: float | None = None) -> list[str]:
        """Take the still pending, due, not expired ones for removal now; the caller must
        :meth:`finish` them once removed. Those past their deadline are dropped."""
        at = self.clock() if now is None else now
        claimed: list[str] = []
        with self._cond:
            wall = self.wall()
            for h in hashes:
                p = self.pending.get(h)
                if p is None or p.due > at:
                    continue  # cancelled by a keep, or replaced by a later evict
                del self.pending[h]
                if p.not_after is not None and wall > p.not_after:
                    self.expired += 1
                    continue
                self.removing[h] = p.generation
                claimed.append(h)
        return claimed

    def finish(self, hashes: Sequence[str]) -> None:
        """The claimed ``hashes`` are removed (or their removal failed): done."""
        with self._cond:
            for h in hashes:
                gen = self.removing.pop(h, None)
                if gen is not None:
                    self._remember_done(h, gen)
            self._cond.notify_all()

    def next_due(self) -> float | None:
        """When the earliest pending delete is due (clock time), or None."""
        with self._cond:
            return min((p.due for p in self.pending.values()), default=None)


def _integer(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RequestError(f"field '{name}' must be a non-negative integer")
    return value


def parse_generation(body: dict) -> int | None:
    """Optional ``generation``: a non-negative integer (the daemon's clock in ns)."""
    return _integer(body, "generation")


def parse_not_after(body: dict) -> int | None:
    """Optional ``not_after_ns``: wall clock ns after which the delete must not run."""
    return _integer(body, "not_after_ns")


def parse_defer(body: dict) -> float:
    """Optional ``defer_s``: seconds to hold the delete, 0..60 (absent: 0, act now)."""
    value = body.get("defer_s", 0)
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not (0 <= value <= MAX_DEFER_S)
    ):
        raise RequestError(f"field 'defer_s' must be a number from 0 to {MAX_DEFER_S:g}")
    return float(value)
