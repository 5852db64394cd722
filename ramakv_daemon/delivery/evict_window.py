"""The eviction window: from the moment an evict is written to the cache acting on it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from itertools import repeat

from ramakv_daemon.delivery.window_marks import (
    CLOCK_MARGIN_S,
    EXPIRE_AFTER_DUE_S,
    FAILED_HORIZON_S,
    GRACE_MIN_S,
    Keep,
    Written,
)

log = logging.getLogger("ramakv.backend")


class EvictWindow:
    """Watches evicted chunks until the cache has certainly acted, and reports every
    chunk referenced again inside that window.

    The dispatcher checks a chunk at the moment the evict body is written; the cache acts
    later (after the network, its queue, its worker). A cache that defers deletes
    (ascend_ext's memory API with ``defer_s``) can still be told: a re-referenced chunk
    gets a ``keep`` of a newer generation, and the commit of the change that referenced it
    waits until the cache answered (``late`` names the chunks whose older delete had
    already run: "missed", a cache miss before the reference was committed; every other
    one is "kept") or until the evict's deadline has passed (``not_after_ns``: the cache
    refuses a delete past it, so the delete ran before the commit or never). With such a
    cache no delete acts on a chunk after a new reference to it was committed. A stock
    cache (no deferral, no keep), or one not known to honour deadlines whose keep does not
    get through, leaves the chunk "exposed": it may have been evicted while referenced.
    Counted and traced, never silent.
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
        # Whether the cache honours not_after_ns (its answers carry "expires": true).
        self.expires: bool | None = None
        self._gen = 0
        self._released = 0  # commits released at a deadline since the last log line
        self._released_wait = 0.0
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
        # The earlier run wrote them before it stopped, so their deadlines are older than
        # one from now (the same evict_defer_s assumed: a longer one then is not known).
        deadline = self.deadline_from(now)
        for h in hashes:
            if h not in self.open:
                self.open[h] = Written(0, now, until, answered=True, deadline=deadline)

    def generation(self) -> int:
        """A new generation: the wall clock in ns, strictly increasing (so it orders
        across restarts too)."""
        self._gen = max(time.time_ns(), self._gen + 1)
        return self._gen

    def not_after(self, generation: int) -> int:
        """The deadline (wall clock ns) sent with an evict of ``generation``."""
        return generation + int((self.defer_s + EXPIRE_AFTER_DUE_S) * 1e9)

    def deadline_from(self, at: float) -> float:
        """Monotonic time past which an evict written at ``at`` can no longer act."""
        return at + self.defer_s + EXPIRE_AFTER_DUE_S + CLOCK_MARGIN_S

    def wrote(self, hashes: list[str], generation: int, at: float) -> None:
        """An evict of ``hashes`` went out at ``at``: watch them until it is answered."""
        deadline = self.deadline_from(at) if self.defer_s > 0 else float("inf")
        # One mark shared by the batch (never changed in place: see answered).
        self.open.update(
            dict.fromkeys(hashes, Written(generation, at, float("inf"), deadline=deadline))
        )
        keeps = self.keeps
        if not keeps or keeps.keys().isdisjoint(hashes):
            return
        for h in hashes:
            # A newer evict supersedes a keep still owed. Its change has been committed
            # (after its gate was released at the deadline: nothing to report when the
            # cache honours deadlines, the delete ran before that commit or never) or
            # rolled back (its gate never resolved: nothing was committed to expose).
            k = keeps.pop(h, None)
            if k is not None and k.gate is not None and not k.protected:
                if k.gate.cancelled() or k.gate.done():
                    self._lost([h])  # committed without the cache's word or a deadline

    def answered(
        self,
        hashes: list[str],
        ok: bool,
        deferred: bool,
        at: float,
        expires: bool = False,
        refused: bool = False,
    ) -> None:
        """Its answer came: a deferring cache acts at the defer's end, an inline one has
        acted; a failed call may still be acted on later (until its deadline, by a cache
        that honours deadlines) unless it was ``refused`` (an answer saying it did
        nothing: a 4xx, a 503)."""
        if ok and self.defer_s > 0:
            self.defers = deferred
            if deferred:
                self.expires = expires
        open_ = self.open
        if refused or (ok and not deferred):
            # Nothing more to watch (refused: nothing was done; inline: done).
            if open_:
                deque(map(open_.pop, hashes, repeat(None)), maxlen=0)
            self.prune(at)
            return
        if not ok:
            until = at + max(self.defer_s, FAILED_HORIZON_S)
        else:
            # Not wrote_at + defer_s: the cache's deferral began later than the write
            # and its delete runs later than its due time (seen: 40-50 ms under load).
            until = at + self.defer_s + self.grace()
        capped = self.expires is True
        # A mark is shared by the chunks written together (and maybe by some not in this
        # answer): each one here gets a new mark, one per mark it had.
        marks = list(map(open_.get, hashes))
        if marks and marks[0] is not None and marks.count(marks[0]) == len(marks):
            groups = {id(marks[0]): (marks[0], hashes)}
        else:
            groups = {}
            for h, w in zip(hashes, marks, strict=True):
                if w is not None:
                    groups.setdefault(id(w), (w, []))[1].append(h)
        for w, hs in groups.values():
            end = min(until, w.deadline) if capped else until
            open_.update(
                dict.fromkeys(hs, Written(w.generation, w.wrote_at, end, True, w.deadline))
            )
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
                self.keeps[h] = Keep(
                    self.generation(), w.wrote_at, now + FAILED_HORIZON_S, gate, w.deadline
                )
                keep.append(h)
            else:
                exposed.append(h)
        if exposed and self.report is not None:
            self.report("exposed", exposed, since)
        if keep and self.report is not None:
            self.report("rereferenced", keep, since)
        return keep

    def release(self, gate: asyncio.Future[None], since: float = 0.0) -> None:
        """``gate``'s deadline has passed (every evict it guards can no longer act): let
        its commit go ahead; the keeps stay owed (retried) and report when answered.
        ``since``: when the commit began to wait (monotonic), for the log."""
        if gate.done():
            return  # answered in time
        capped = self.expires is True
        for k in self.keeps.values():
            if k.gate is gate:
                k.protected = capped
        gate.set_result(None)
        # A commit that waited this long held every event behind it: say so (one line
        # a second at most, counting the commits released in it).
        now = time.monotonic()
        self._released += 1
        self._released_wait = max(self._released_wait, now - since if since else 0.0)
        if self._released == 1:
            gate.get_loop().call_later(1.0, self._log_released)

    def _log_released(self) -> None:
        log.warning(
            "%d commits waited for the cache's answer to a keep until the evicts' "
            "deadline (longest %.2f s; the cache %s deadlines)",
            self._released,
            self._released_wait,
            "honours" if self.expires is True else "is not known to honour",
        )
        self._released, self._released_wait = 0, 0.0

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
        expires: bool | None = None,
    ) -> list[str]:
        """A keep call's answer: report the chunks it saved or lost; those left to retry.

        ``late``: the chunks whose delete the cache says had already run. ``supported`` is
        False when the cache does not know keeps (a stock memory API): then it does not
        defer either, and nothing can be saved. ``generation``: the call's; a keep owed
        since (newer: the chunk was evicted and referenced again meanwhile) is not answered
        by it and stays owed. ``expires``: whether the answer says the cache honours
        deadlines. A keep released at its deadline (``protected``) is at worst "missed".
        """
        if not supported:
            self.defers = False
        elif ok and expires is not None:
            self.expires = expires
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
            # The referencing change's commit waited for this answer (or the deadline).
            # Without a gate (owed for an earlier run's evict, the reference committed
            # already): every such commit waited too, where the cache honours deadlines.
            if gate is None:
                waited = self.expires is True
            else:
                waited = not gate.cancelled() and (k.protected or not gate.done())
            if ok and h in too_late:
                # The delete ran before the keep: if the referencing change was still
                # waiting for this answer, it ran before the new reference was committed
                # (a cache miss, not an eviction of a referenced chunk).
                (missed if waited else lost).append(h)
            elif ok:
                saved.append(h)
            elif not supported or now > k.give_up:
                (missed if k.protected or (gate is None and waited) else lost).append(h)
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
            for outcome, hs in (("kept", saved), ("missed", missed)):
                if hs:
                    self.report(outcome, hs, 0.0)
        self._lost(lost)
        return retry

    def _lost(self, hashes: list[str]) -> None:
        if hashes and self.report is not None:
            self.report("exposed", hashes, 0.0)

    def owed(self) -> dict[str, int]:
        """hash -> generation of every keep not confirmed yet."""
        return {h: k.generation for h, k in self.keeps.items()}

    def prune(self, now: float) -> None:
        """Forget chunks whose window has closed (at most every 50 ms: it scans)."""
        if self.open and now - self._pruned_at >= 0.05:
            self._pruned_at = now
            for h in [h for h, w in self.open.items() if w.until < now]:
                del self.open[h]
