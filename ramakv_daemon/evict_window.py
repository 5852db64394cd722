"""The eviction window: from the moment an evict is written to the cache acting on it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# A failed call may still be acted on late by a cache that hung: its chunks stay watched
# this long (re-references in it are reported, and kept where the cache defers).
FAILED_HORIZON_S = 60.0


@dataclass(slots=True)
class Written:
    """One chunk of an evict that went out."""

    generation: int
    wrote_at: float
    until: float  # watched up to here: the answer (cache acts inline) or the defer's end
    answered: bool = False


@dataclass(slots=True)
class Keep:
    """A keep owed to the cache for a chunk referenced again inside its window."""

    generation: int
    wrote_at: float
    deadline: float  # the cache's pending delete fires by then; inf until the evict's answer


class EvictWindow:
    """Watches evicted chunks until the cache has certainly acted, and reports every
    chunk referenced again inside that window.

    The dispatcher checks a chunk at the moment the evict body is written; the cache acts
    later (after the network, its queue, its worker). A cache that defers deletes
    (ascend_ext's memory API with ``defer_s``) can still be told: a re-referenced chunk
    gets a ``keep`` with a newer generation, and if that keep is confirmed before the
    deferral ends the chunk is certainly kept ("kept"). Otherwise (a stock cache, or a
    keep that did not get through in time) it may have been evicted while referenced
    ("exposed"): counted and traced, never silent.
    """

    def __init__(
        self, defer_s: float,
        report: Callable[[str, list[str], float], None] | None = None,
    ) -> None:
        self.defer_s = defer_s
        self.report = report  # (outcome, hashes, seconds since the write)
        self.open: dict[str, Written] = {}
        self.keeps: dict[str, Keep] = {}
        # Whether the cache defers (its evict answers carry "deferred"); None: not known yet.
        self.defers: bool | None = None if defer_s > 0 else False
        self._gen = 0
        self._pruned_at = 0.0

    def generation(self) -> int:
        """A new generation: the wall clock in ns, strictly increasing (so it orders
        across restarts too)."""
        self._gen = max(time.time_ns(), self._gen + 1)
        return self._gen

    def wrote(self, hashes: list[str], generation: int, at: float) -> None:
        """An evict of ``hashes`` went out at ``at``: watch them until it is answered."""
        keeps = self.keeps
        for h in hashes:
            self.open[h] = Written(generation, at, float("inf"))
            keeps.pop(h, None)  # this newer evict supersedes a keep still owed

    def answered(self, hashes: list[str], ok: bool, deferred: bool, at: float) -> None:
        """Its answer came: a deferring cache acts at the defer's end, an inline one has
        acted; a failed call may still be acted on later."""
        if ok and self.defer_s > 0:
            self.defers = deferred
        lost: list[str] = []
        for h in hashes:
            k = self.keeps.get(h)
            if k is not None and k.deadline == float("inf"):
                if ok and not deferred:
                    lost.append(h)  # acted on inline, before or after the reference
                    del self.keeps[h]
                else:
                    k.deadline = (k.wrote_at + self.defer_s) if ok else at + FAILED_HORIZON_S
            w = self.open.get(h)
            if w is None:
                continue
            w.answered = True
            if not ok:
                w.until = at + max(self.defer_s, FAILED_HORIZON_S)
            elif deferred:
                w.until = w.wrote_at + self.defer_s
            else:
                del self.open[h]
        if lost and self.report is not None:
            self.report("exposed", lost, 0.0)
        self.prune(at)

    def referenced(self, hashes: Iterable[str], now: float) -> list[str]:
        """``hashes`` are referenced again (committed): those to send a keep for."""
        self.prune(now)
        keep: list[str] = []
        exposed: list[str] = []
        since = 0.0
        for h in hashes:
            w = self.open.pop(h, None)
            if w is None or w.until < now:
                continue
            since = max(since, now - w.wrote_at)
            if self.defers is not False:
                deadline = w.wrote_at + self.defer_s if w.answered else float("inf")
                self.keeps[h] = Keep(self.generation(), w.wrote_at, deadline)
                keep.append(h)
            else:
                exposed.append(h)
        if exposed and self.report is not None:
            self.report("exposed", exposed, since)
        if keep and self.report is not None:
            self.report("rereferenced", keep, since)
        return keep

    def kept(self, hashes: list[str], ok: bool, supported: bool, now: float) -> list[str]:
        """A keep call's answer: report the chunks it saved or lost; those left to retry.

        ``supported`` is False when the cache does not know keeps (a stock memory API):
        then it does not defer either, and nothing can be saved.
        """
        if not supported:
            self.defers = False
        saved, lost, retry = [], [], []
        for h in hashes:
            k = self.keeps.get(h)
            if k is None:
                continue
            if ok and now <= k.deadline:
                saved.append(h)
            elif ok or now > k.deadline or not supported:
                lost.append(h)
            else:
                retry.append(h)
                continue
            del self.keeps[h]
        if self.report is not None:
            if saved:
                self.report("kept", saved, 0.0)
            if lost:
                self.report("exposed", lost, 0.0)
        return retry

    def owed(self) -> dict[str, int]:
        """hash -> generation of every keep not confirmed yet."""
        return {h: k.generation for h, k in self.keeps.items()}

    def prune(self, now: float) -> None:
        """Forget chunks whose window has closed (at most every 50 ms: it scans)."""
        if self.open and now - self._pruned_at >= 0.05:
            self._pruned_at = now
            for h in [h for h, w in self.open.items() if w.until < now]:
                del self.open[h]
