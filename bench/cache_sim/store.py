"""Two-tier KV store: DDR with LRU, SSD (LRU, bounded) behind one shared bandwidth queue."""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Request:
    """An engine lookup waiting for its SSD loads."""

    t: float
    outstanding: int
    ready: float
    on_ready: Callable[[Request], None] | None = None
    data: object = None


@dataclass(slots=True)
class Item:
    """One chunk read queued on the SSD (a prefetch, or a demand load the engine waits on)."""

    chunk: int
    demand: bool
    deadline: float
    seq: int
    stale: bool = False
    waiters: list[Request] = field(default_factory=list)


@dataclass(slots=True)
class StoreStats:
    """Counters over a run."""

    ddr_evictions: int = 0
    ssd_evictions: int = 0
    ssd_busy_s: float = 0.0
    demand_loads: int = 0
    prefetch_enqueued: int = 0
    prefetch_loaded: int = 0
    prefetch_skipped_ddr: int = 0
    prefetch_skipped_missing: int = 0
    prefetch_dropped_cap: int = 0
    prefetch_used: int = 0
    prefetch_wasted: int = 0
    deleted: int = 0
    demoted: int = 0


class TwoTierStore:
    """DDR (LRU, ``ddr_cap`` chunks) over SSD (LRU, ``ssd_cap`` chunks).

    Every chunk the engine stores goes to both tiers (write-through, as LMCache's local
    disk backend). SSD writes are not charged to the read queue (ASSUMPTION: NVMe reads
    and writes are largely independent at these rates). All SSD reads — prefetches and
    the engine's demand loads — are served one at a time by one queue at the cost
    model's bandwidth: FIFO, or with ``priority`` demand loads first and then prefetches
    by deadline. A prefetch is checked when the queue reaches it (as ascend_ext's worker
    does): a chunk already in DDR, or no longer on SSD, is skipped at no cost, unless
    ``recheck`` is False (then it is read again).
    """

    def __init__(
        self,
        ddr_cap: int,
        ssd_cap: int,
        chunk_s: float,
        *,
        priority: bool = False,
        recheck: bool = True,
    ) -> None:
        self.ddr: OrderedDict[int, None] = OrderedDict()
        self.ssd: OrderedDict[int, None] = OrderedDict()
        self.ddr_cap, self.ssd_cap, self.chunk_s = ddr_cap, ssd_cap, chunk_s
        self.priority, self.recheck = priority, recheck
        self._fifo: deque[Item] = deque()
        self._heap: list[tuple[float, int, Item]] = []
        self.pending: dict[int, Item] = {}
        self.queued = 0  # live items waiting (not in service)
        self.in_service: Item | None = None
        self.service_end = 0.0
        self._seq = 0
        self.prefetched: set[int] = set()
        self.stats = StoreStats()

    # ---- tiers -----------------------------------------------------------------------
    def ddr_put(self, c: int) -> None:
        ddr = self.ddr
        if c in ddr:
            ddr.move_to_end(c)
            return
        ddr[c] = None
        while len(ddr) > self.ddr_cap:
            old, _ = ddr.popitem(last=False)
            self.stats.ddr_evictions += 1
            if old in self.prefetched:
                self.prefetched.discard(old)
                self.stats.prefetch_wasted += 1

    def ssd_put(self, c: int) -> None:
        ssd = self.ssd
        if c in ssd:
            ssd.move_to_end(c)
            return
        ssd[c] = None
        while len(ssd) > self.ssd_cap:
            ssd.popitem(last=False)
            self.stats.ssd_evictions += 1

    def write(self, chunks: Iterable[int]) -> None:
        """The engine stored these chunks after prefill: both tiers, most recent."""
        for c in chunks:
            self.ddr_put(c)
            self.ssd_put(c)

    def touch(self, c: int) -> bool:
        """Refresh a DDR-resident chunk's recency; False when it is not in DDR."""
        if c in self.ddr:
            self.ddr.move_to_end(c)
            return True
        return False

    def delete(self, chunks: Iterable[int]) -> None:
        """Drop from every tier; queued prefetches of them are cancelled."""
        for c in chunks:
            self.stats.deleted += 1
            self.ddr.pop(c, None)
            self.ssd.pop(c, None)
            self.prefetched.discard(c)
            item = self.pending.get(c)
            if item is not None and not item.demand and item is not self.in_service:
                self._cancel(item)

    def demote(self, chunks: Iterable[int]) -> None:
        """Drop from DDR, keep (or write) on SSD."""
        for c in chunks:
            self.stats.demoted += 1
            if self.ddr.pop(c, 0) is None:
                self.ssd_put(c)
            self.prefetched.discard(c)

    def where(self, c: int) -> list[str]:
        """Tier names holding ``c``."""
        return [name for name, tier in (("ddr", self.ddr), ("ssd", self.ssd)) if c in tier]

    # ---- the SSD queue ---------------------------------------------------------------
    def backlog_s(self, now: float, before: float | None = None) -> float:
        """Seconds of queued reads ahead of a new item (with ``priority``, only those
        due no later than ``before``)."""
        busy = max(0.0, self.service_end - now) if self.in_service is not None else 0.0
        if self.priority and before is not None:
            n = sum(1 for d, _, it in self._heap if not it.stale and d <= before)
        else:
            n = self.queued
        return busy + n * self.chunk_s

    def enqueue(
        self, c: int, demand: bool, deadline: float, now: float, waiter: Request | None = None
    ) -> Item:
        """Queue a read of ``c`` (joining one already queued); start the queue if idle."""
        item = self.pending.get(c)
        if item is not None:
            if demand and not item.demand and item is not self.in_service and self.priority:
                self._cancel(item)
                new = self._push(c, True, min(deadline, item.deadline))
                new.waiters = item.waiters
                item = new
            elif demand:
                item.demand = True
        else:
            item = self._push(c, demand, deadline)
            if not demand:
                self.stats.prefetch_enqueued += 1
        if waiter is not None:
            item.waiters.append(waiter)
        if self.in_service is None:
            self._start_next(now)
        return item

    def _push(self, c: int, demand: bool, deadline: float) -> Item:
        self._seq += 1
        item = Item(c, demand, deadline, self._seq)
        self.pending[c] = item
        self.queued += 1
        if self.priority:
            heapq.heappush(self._heap, (deadline, self._seq, item))
        else:
            self._fifo.append(item)
        return item

    def _cancel(self, item: Item) -> None:
        if not item.stale:
            item.stale = True
            self.queued -= 1
            if self.pending.get(item.chunk) is item:
                del self.pending[item.chunk]

    def _pop(self) -> Item | None:
        while self._heap if self.priority else self._fifo:
            item = heapq.heappop(self._heap)[2] if self.priority else self._fifo.popleft()
            if not item.stale:
                self.queued -= 1
                return item
        return None

    def _start_next(self, now: float) -> None:
        self.in_service = None
        while True:
            item = self._pop()
            if item is None:
                return
            if not item.demand and not item.waiters:
                if self.recheck and item.chunk in self.ddr:
                    self.stats.prefetch_skipped_ddr += 1
                    del self.pending[item.chunk]
                    continue
                if item.chunk not in self.ssd:
                    self.stats.prefetch_skipped_missing += 1
                    del self.pending[item.chunk]
                    continue
            self.in_service = item
            self.service_end = now + self.chunk_s
            self.stats.ssd_busy_s += self.chunk_s
            return

    def next_time(self) -> float | None:
        """When the read in service completes (None when the queue is idle)."""
        return self.service_end if self.in_service is not None else None

    def step(self) -> None:
        """Complete the read in service: the chunk lands in DDR; waiters are told."""
        item, now = self.in_service, self.service_end
        assert item is not None
        del self.pending[item.chunk]
        if item.waiters or item.demand:
            self.stats.demand_loads += 1
            self.prefetched.discard(item.chunk)
        else:
            self.stats.prefetch_loaded += 1
            self.prefetched.add(item.chunk)
        self.ddr_put(item.chunk)
        if item.chunk in self.ssd:
            self.ssd.move_to_end(item.chunk)
        for req in item.waiters:
            req.outstanding -= 1
            req.ready = max(req.ready, now)
            if req.outstanding == 0 and req.on_ready is not None:
                req.on_ready(req)
        self._start_next(now)

    # ---- the engine's lookup -----------------------------------------------------------
    def lookup(self, prefix: tuple[int, ...], req: Request) -> tuple[int, int, int]:
        """Classify a prompt's reusable chunks: (from DDR, from SSD, recomputed).

        Prefix semantics: the first chunk found in no tier ends reuse; it and everything
        after it is recomputed. Chunks on SSD (or already being read) become demand loads
        the request waits for; ``req.on_ready`` fires when the last one lands (never when
        there is none: the caller checks ``req.outstanding``).
        """
        ddr, ssd, pending, prefetched = self.ddr, self.ssd, self.pending, self.prefetched
        hits = 0
        loads: list[int] = []
        rec = 0
        for i, c in enumerate(prefix):
            if c in ddr:
                ddr.move_to_end(c)
                hits += 1
                if c in prefetched:
                    prefetched.discard(c)
                    self.stats.prefetch_used += 1
            elif c in pending or c in ssd:
                loads.append(c)
            else:
                rec = len(prefix) - i
                break
        req.outstanding = len(loads)
        req.ready = req.t
        for c in loads:
            self.enqueue(c, True, req.t, req.t, req)
        return hits, len(loads), rec
