"""The eviction window: from the moment an evict is written to the cache acting on it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# A failed call may still be acted on late by a cache that hung: its chunks stay watched
# this long (re-references in it are reported, and kept where the cache defers).
log = logging.getLogger("ramakv.backend")

FAILED_HORIZON_S = 60.0
# A deferring cache starts its deferral when it processes the evict (after the write) and
# carries the delete out when its timer runs (later still, on a busy cache): a chunk stays
# watched this much past answer + defer_s. A keep that comes after the delete ran is
# answered ``late`` and reported, so the grace only bounds how late a silent one could be.
GRACE_MIN_S = 1.0
TRACE_HASHES = 20  # hashes named in one evict_window trace record


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
    give_up: float  # retried until then (the cache down or hung); then reported exposed
    # The commit of the change that referenced the chunk waits on this (bounded): resolved
    # by the cache's answer; cancelled when the commit went ahead without it.
    gate: asyncio.Future[None] | None = None


class EvictWindow:
    """Watches evicted chunks until the cache has certainly acted, and reports every
    chunk referenced again inside that window.

    The dispatcher checks a chunk at the moment the evict body is written; the cache acts
    later (after the network, its queue, its worker). A cache that defers deletes
    (ascend_ext's memory API with ``defer_s``) can still be told: a re-referenced chunk
    gets a ``keep`` with a newer generation, and if that keep is confirmed before the
    the cache answers whether it was in time: its ``late`` list names the chunks whose
    older delete had already run ("exposed"); every other one is certainly kept ("kept":
    its pending delete is cancelled, and an older evict still on its way is refused). A
    stock cache (no deferral, no keep), or a keep that never gets through, leaves the
    chunk "exposed": it may have been evicted while referenced. Counted and traced, never
    silent.
    """

    def __init__(
        self,
        defer_s: float,
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

    def grace(self) -> float:
        """How long past answer + defer_s a delete may still be carried out."""
        return max(GRACE_MIN_S, self.defer_s)

    def loaded(self, hashes: list[str], now: float) -> None:
        """Intents an earlier run may have sent, their delete still pending in the cache
        (outbox rows loaded at start-up): watched from now, so a change referencing one
        before it is sent again gets a keep before its commit."""
        if self.defers is False or not hashes:
            return
        until = now + self.defer_s + self.grace()
        for h in hashes:
            if h not in self.open:
                self.open[h] = Written(0, now, until, answered=True)

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
        for h in hashes:
            w = self.open.get(h)
            if w is None:
                continue
            w.answered = True
            if not ok:
                w.until = at + max(self.defer_s, FAILED_HORIZON_S)
            elif deferred:
                # Not wrote_at + defer_s: the cache's deferral began later than the write
                # and its delete runs later than its due time (seen: 40-50 ms under load).
                w.until = at + self.defer_s + self.grace()
            else:
                del self.open[h]
        self.prune(at)

    def referenced(
        self, hashes: Iterable[str], now: float, gate: asyncio.Future[None] | None = None
    ) -> list[str]:
        """``hashes`` are referenced again by a change not committed yet: those to send a
        keep for (the change's commit waits on ``gate`` until the cache has answered)."""
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
                self.keeps[h] = Keep(self.generation(), w.wrote_at, now + FAILED_HORIZON_S, gate)
                keep.append(h)
            else:
                exposed.append(h)
        if exposed and self.report is not None:
            self.report("exposed", exposed, since)
        if keep and self.report is not None:
            self.report("rereferenced", keep, since)
        return keep

    def owe(self, hashes: Iterable[str], now: float) -> bool:
        """Keeps for chunks an earlier run may have had evicted with a delete still
        pending in the cache (outbox rows loaded at start-up, now referenced)."""
        if self.defers is False:
            return False
        added = False
        for h in hashes:
            if h not in self.keeps:
                self.keeps[h] = Keep(self.generation(), now, now + FAILED_HORIZON_S)
                added = True
        return added

    def kept(
        self,
        hashes: list[str],
        ok: bool,
        supported: bool,
        late: list[str],
        now: float,
        generation: int | None = None,
    ) -> list[str]:
        """A keep call's answer: report the chunks it saved or lost; those left to retry.

        ``late``: the chunks whose delete the cache says had already run. ``supported`` is
        False when the cache does not know keeps (a stock memory API): then it does not
        defer either, and nothing can be saved. ``generation``: the call's; a keep owed
        since (newer: the chunk was evicted and referenced again meanwhile) is not answered
        by it and stays owed.
        """
        if not supported:
            self.defers = False
        too_late = set(late)
        saved: list[str] = []
        missed: list[str] = []
        lost: list[str] = []
        retry: list[str] = []
        answered: list[asyncio.Future[None]] = []
        waiting: set[asyncio.Future[None]] = set()
        for h in hashes:
            k = self.keeps.get(h)
            if k is None or (generation is not None and k.generation > generation):
                continue
            gate = k.gate
            if ok and h in too_late:
                # The delete ran before the keep: if the referencing change was still
                # waiting for this answer, it ran before the new reference was committed
                # (a cache miss, not an eviction of a referenced chunk).
                (missed if gate is not None and not gate.cancelled() else lost).append(h)
            elif ok:
                saved.append(h)
            elif not supported or now > k.give_up:
                lost.append(h)
            else:
                retry.append(h)
                if gate is not None:
                    waiting.add(gate)
                continue
            if gate is not None:
                answered.append(gate)
            del self.keeps[h]
        for gate in answered:
            if gate not in waiting and not gate.done():
                gate.set_result(None)
        if self.report is not None:
            for outcome, hs in (("kept", saved), ("missed", missed), ("exposed", lost)):
                if hs:
                    self.report(outcome, hs, 0.0)
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


def window_record(key: str, outcome: str, hashes: list[str]) -> dict[str, object] | None:
    """The trace record of one window outcome (None for those only measured)."""
    if outcome not in ("kept", "missed", "exposed", "repeated"):
        return None
    record: dict[str, object] = {
        "kind": "evict_window",
        "ts": time.time(),
        "outcome": outcome,
        "count": len(hashes),
        "hashes": hashes[:TRACE_HASHES],
    }
    if key:
        record["namespace"] = key
    return record


def report_window(
    metrics: Any,
    publish: Callable[[dict[str, object]], object],
    key: str,
    outcome: str,
    hashes: list[str],
    seconds: float,
) -> None:
    """One window report of namespace ``key``: metrics; a trace record and, for an
    exposed chunk, a warning."""
    metrics.window(outcome, len(hashes), seconds)
    record = window_record(key, outcome, hashes)
    if record is not None:
        publish(record)
        if outcome == "exposed":
            log.warning(
                "%d chunks referenced again while their eviction may have been "
                "acted on (namespace %r): %s",
                len(hashes),
                key,
                record["hashes"],
            )
