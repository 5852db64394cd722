"""The outbox's delivery loop: due evictions, checked again as written, sent with backoff."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from itertools import compress, repeat
from operator import is_, itemgetter
from typing import cast

from ramakv_daemon.delivery.delivery_state import DeliveryState
from ramakv_daemon.delivery.evict_window import EvictWindow
from ramakv_daemon.delivery.keeps import RECHECK_S, Keeps
from ramakv_daemon.delivery.outbox import Intent, Outbox
from ramakv_daemon.ports import Backend, BackendResult, CommittedRow, EvictMode, EvictRequest

log = logging.getLogger("ramakv.backend")

MAX_BATCH = 1000
MAX_BACKOFF_S = 60.0
# The answers of a cache that has no such route: a stock memory API (404), an older
# ascend_ext (405).
ROUTE_MISSING = (404, 405)

Report = Callable[[str, int, BackendResult], None]


class EvictDelivery:
    """Delivers the outbox's due intents in batches; a failed call pauses every delivery
    to the backend (the backoff is the backend's, not each chunk's: failures are outages,
    and retrying every chunk on its own clock cost a 260,000-chunk backlog ~40 % of the
    loop)."""

    def __init__(
        self,
        backend: Backend,
        outbox: Outbox,
        window: EvictWindow,
        keeps: Keeps,
        state: DeliveryState,
        report: Report,
        on_failure: Callable[[str, int, BackendResult, int], None] | None,
        on_window: Callable[[str, list[str], float], None] | None,
        defer_s: float,
        base_backoff_s: float,
    ) -> None:
        self.backend = backend
        self.outbox = outbox
        self.window = window
        self.keeps = keeps
        self.state = state
        self.report = report
        self.on_failure = on_failure
        self.on_window = on_window
        self.defer_s = defer_s
        self.base_backoff_s = base_backoff_s
        self.max_backoff_s = MAX_BACKOFF_S  # the longest pause after failures in a row
        self.failures = 0
        self.paused_until = 0.0
        self._runner: asyncio.Task[None] | None = None
        self._closing = False

    def ingest(self) -> None:
        """Queue what was committed since the last look (every read of the outbox looks
        first, so it is as current as if the commit had queued it itself)."""
        items = self.state.committed()
        if not items:
            return
        outbox = self.outbox
        for item in items:
            if isinstance(item, CommittedRow):
                outbox.add(item.delete, item.demote, item.row_id, item.cold)
                continue
            # Kept for a change that was rolled back: unreferenced now, it was kept in the
            # cache for nothing; ordered cold again (never deleted on that guess: the
            # retention sweep deletes what stays dead).
            refs = self.state.references()
            free = [h for h in item.hashes if h not in refs]
            if free:
                outbox.add((), (), 0, free)

    def start(self) -> None:
        """Start the delivery loop."""
        self._runner = asyncio.get_running_loop().create_task(self._run(), name="evict-outbox")
        self.outbox.wake.set()

    async def _run(self) -> None:
        wake = self.outbox.wake
        while not self._closing:
            timeout = self.outbox.next_due_in(time.monotonic(), self.paused_until)
            try:
                await asyncio.wait_for(wake.wait(), timeout)
            except TimeoutError:
                pass
            wake.clear()
            if self._closing:
                return
            try:
                await self.deliver_due()
            except Exception:  # backends must not raise; if one does, back off
                log.exception("eviction delivery failed unexpectedly; retrying after backoff")
                self._back_off()

    def _back_off(self) -> None:
        """One more failure in a row: pause every delivery to the backend for longer."""
        self.failures += 1
        backoff = min(self.max_backoff_s, self.base_backoff_s * 2 ** (self.failures - 1))
        self.paused_until = time.monotonic() + backoff

    async def deliver_due(self) -> None:
        """One delivery round: every due intent, in batches of one mode each."""
        self.ingest()
        now = time.monotonic()
        outbox = self.outbox
        outbox.settle(now)
        outbox.promote(now)
        if not outbox.ready or now < self.paused_until:
            return
        entries = outbox.entries
        due = outbox.take_ready()
        modes = list(map(_MODE, map(entries.__getitem__, due)))
        batches = [
            (hashes[i : i + MAX_BATCH], mode)
            for mode in (EvictMode.DELETE, EvictMode.DEMOTE, EvictMode.COLD)
            if (hashes := _of_mode(due, modes, mode))
            for i in range(0, len(hashes), MAX_BATCH)
        ]
        for n, (batch, mode) in enumerate(batches):
            # Checked again just before its call: an earlier batch's await may have let a
            # chunk be referenced again, or its intent be replaced by one of the other mode
            # (that one is queued on its own).
            part = self._sendable(batch, mode)  # checked again as its body is written
            if not part:
                continue
            try:
                if mode is EvictMode.COLD:
                    delivered = await self._order_cold(part)
                else:
                    delivered = await self._deliver(part, mode)
            except BaseException:
                # Cancelled (shutdown) with batches unsent: they stay due for drain().
                outbox.requeue((b for b, _ in batches[n:]), [])
                raise
            if not delivered:
                # The rest waits out the backoff ahead of what arrived meanwhile; the failed
                # batch goes last, so one the backend always refuses cannot hold back others.
                outbox.requeue((b for b, _ in batches[n + 1 :]), part)
                return

    def _sendable(self, batch: list[str], mode: EvictMode) -> list[str]:
        """The hashes of ``batch`` still queued in ``mode`` and still unreferenced.

        One referenced again is forgotten, or, while a commit is in flight (the new
        reference may yet be rolled back), looked at again shortly.
        """
        self.ingest()
        outbox = self.outbox
        entries = outbox.entries
        part = _of_mode(batch, list(map(_MODE, map(entries.get, batch, repeat(_ABSENT)))), mode)
        held = self.state.referenced(part)
        # Only a committed release is deliverable: a chunk an uncommitted change moved may
        # end up referenced (that change commits) or back where it was (it is rolled back).
        doubt = self.state.in_doubt(part)
        again = [h for h in held if h not in doubt] if doubt else held
        if again:
            sent_before = outbox.repeat
            if sent_before:
                # An earlier run may have sent this evict, its delete still pending in the
                # cache, and then committed the new reference: tell the cache to keep it.
                self.keeps.owe(h for h in again if h in sent_before)
            outbox.forget_all(again)
            outbox.flush_rows()
        if doubt:
            recheck = time.monotonic() + RECHECK_S
            for h in doubt:
                outbox.wait(h, recheck)
        if not (again or doubt):
            return part
        skip = doubt.union(held)
        return [h for h in part if h not in skip]

    async def _order_cold(self, hashes: list[str]) -> bool:
        """One order hint (the cold end of the cache's eviction order: nothing removed).
        A cache without the route (404/405: a stock memory API, a backend without order)
        is sent nothing: its own LRU orders them. A demote instead cost a disk read each
        time the guess was wrong (stock stack, workload (a): 1.20x the latency of LMCache
        alone), and an inferred release must never cost more than doing nothing. True
        when the backend took it (or it was left to the cache)."""
        outbox = self.outbox
        entries = list(map(outbox.entries.__getitem__, hashes))
        result = await self.backend.order(hashes, "cold")
        if not result.ok and result.status in ROUTE_MISSING:
            self.ingest()
            outbox.forget_all(_unchanged(hashes, entries, outbox.entries))
            outbox.flush_rows()
            self.report("cold_left", len(hashes), BackendResult(True, 0, "no order route"))
            return True
        self.report("order_cold", len(hashes), result)
        self.ingest()  # a newer intent committed while the call was out stays queued
        if result.ok:
            outbox.forget_all(_unchanged(hashes, entries, outbox.entries))
            outbox.flush_rows()
            self.failures, self.paused_until = 0, 0.0
            return True
        self._back_off()
        if self.on_failure is not None:
            self.on_failure("order_cold", len(hashes), result, len(outbox))
        return False

    async def _deliver(self, hashes: list[str], mode: EvictMode) -> bool:
        """One evict call, its hashes checked once more as the body is written; True when
        the backend took it (or nothing was left to send)."""
        outbox, window = self.outbox, self.window
        entries: dict[str, Intent] = {}
        # The generation is taken at the write too: a keep sent while this call waited for
        # its connection is older, so it cannot make the cache refuse this evict as stale.
        defer_s = self.defer_s

        def at_write(batch: list[str]) -> EvictRequest:
            part = self._sendable(batch, mode)
            entries.update(zip(part, map(outbox.entries.__getitem__, part), strict=True))
            gen = window.generation()
            window.wrote(part, gen, time.monotonic())
            if defer_s > 0:
                return EvictRequest(part, mode, gen, defer_s, window.not_after(gen))
            return EvictRequest(part, mode, gen)

        result, request, wrote_at = await self.backend.evict_checked(hashes, mode, at_write)
        sent = request.chunk_hashes if request is not None else []
        answered_at = time.monotonic()
        self.ingest()  # a newer intent committed while the call was out stays queued
        deferred = bool(result.ok and result.body and "deferred" in result.body)
        expires = bool(deferred and result.body and result.body.get("expires") is True)
        # A 4xx or a 503 (no engine there) says nothing was done; a 500 may be partial
        # (some workers acted), a timeout may still be acted on.
        refused = not result.ok and (400 <= result.status < 500 or result.status == 503)
        window.answered(sent, result.ok, deferred, answered_at, expires, refused)
        op = f"evict_{mode.value}"
        # A call that failed before its body went out (connect refused) sent nothing.
        count = len(sent) or len(hashes)
        if sent or not result.ok:
            self.report(op, count, result)
        if sent:
            if self.on_window is not None:
                self.on_window("answered", sent, answered_at - wrote_at)
        repeated = [h for h in sent if h in outbox.repeat] if outbox.repeat else []
        if result.ok:
            if repeated:
                outbox.repeat.difference_update(repeated)
                if self.on_window is not None:
                    self.on_window("repeated", repeated, 0.0)
            # An entry replaced while the call was out is a newer intent: it stays queued.
            outbox.forget_all(
                _unchanged(sent, list(map(entries.__getitem__, sent)), outbox.entries),
                # Kept stored past the evict's deadline too: a restart before it must
                # still watch the chunk (its delete may yet act until then).
                max(answered_at + self.defer_s + window.grace(), window.deadline_from(wrote_at))
                if deferred
                else None,
            )
            outbox.flush_rows()
            self.failures, self.paused_until = 0, 0.0
            return True
        # The cache may have acted before the failure (a timeout): the next try may repeat.
        outbox.repeat.update(sent)
        self._back_off()
        if self.on_failure is not None:
            self.on_failure(op, count, result, len(outbox))
        return False

    async def drain(self, timeout: float) -> None:
        """One delivery round of what is queued (shutdown, tests)."""
        self.ingest()
        if self.outbox.entries:
            try:
                await asyncio.wait_for(self.deliver_due(), timeout)
            except TimeoutError:
                log.warning("shutdown: %d evictions still queued in the outbox", len(self.outbox))

    def stop_soon(self) -> None:
        """Tell the loop to end at its next wake (set now)."""
        self._closing = True
        self.outbox.wake.set()

    async def close(self) -> None:
        """Stop the delivery loop (queued evictions stay in the outbox table)."""
        self.stop_soon()
        if self._runner is not None:
            try:
                await asyncio.wait_for(self._runner, 2)
            except (TimeoutError, asyncio.CancelledError):
                self._runner.cancel()


# Stands for a hash no longer queued: its mode is none of the modes.
_ABSENT = Intent(cast(EvictMode, None), -1, 0)
_MODE = itemgetter(0)  # an Intent's mode


def _of_mode(hashes: list[str], modes: list[EvictMode], mode: EvictMode) -> list[str]:
    """The hashes whose mode (``modes``, in step with them) is ``mode``, in order."""
    n = modes.count(mode)
    if n == len(hashes):  # usually all of them (what one commit queued): no pass in Python
        return hashes[:]
    if not n:
        return []
    return list(compress(hashes, map(is_, modes, repeat(mode))))


def _unchanged(hashes: list[str], then: list[Intent], entries: dict[str, Intent]) -> list[str]:
    """The hashes whose queued intent is still the one of ``then`` (in step with them): an
    entry replaced meanwhile is a newer intent (a new object), which stays queued."""
    now = list(map(entries.get, hashes))
    if now == then:  # identity first, per element, in C
        return hashes
    return [h for h, a, b in zip(hashes, now, then, strict=True) if a is b]
