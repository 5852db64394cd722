"""Keeps: chunks referenced again inside their eviction window are kept by a deferring cache."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from ramakv_daemon.delivery.delivery_state import DeliveryState
from ramakv_daemon.delivery.evict_window import EvictWindow
from ramakv_daemon.ports import Backend, BackendResult

log = logging.getLogger("ramakv.backend")

RECHECK_S = 0.05

Report = Callable[[str, int, BackendResult], None]


class Keeps:
    """Sends the keeps the eviction window owes, on their own task: a keep must get through
    while an evict call is still out (a commit is waiting for its answer)."""

    def __init__(
        self, backend: Backend, window: EvictWindow, state: DeliveryState, report: Report
    ) -> None:
        self.backend = backend
        self.window = window
        self.state = state
        self.report = report
        self._due = 0.0
        self._wake = asyncio.Event()
        self._failures = 0
        self._keeper: asyncio.Task[None] | None = None
        self._probe: asyncio.Task[None] | None = None
        self._closing = False

    def start(self, probe: bool) -> None:
        """Start the keep loop; ``probe``: ask the cache at once whether it honours
        deadlines (only where evicts are deferred)."""
        loop = asyncio.get_running_loop()
        self._keeper = loop.create_task(self._loop(), name="evict-keeps")
        if probe:  # its own task: a hung cache must not hold the keeps back
            self._probe = loop.create_task(self._probe_keeps(), name="keep-probe")

    def send_now(self) -> None:
        """Keeps were added: send them without waiting for a retry's due time."""
        self._due = 0.0
        self._wake.set()

    def keep_for(
        self, prev_counts: dict[str, int]
    ) -> tuple[asyncio.Future[None], list[str]] | None:
        """A change just applied moved these refcounts (hash -> count before it). The
        chunks it took from 0 while their evict may not have been acted on yet get a keep;
        returns the future its commit waits on (the cache's answer) and those hashes."""
        open_ = self.window.open
        if not open_:
            return None
        refs = self.state.references()
        if len(prev_counts) <= len(open_):
            hits = [h for h, n in prev_counts.items() if n == 0 and h in open_ and h in refs]
        else:
            hits = [h for h in open_ if prev_counts.get(h) == 0 and h in refs]
        if not hits:
            return None
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()
        now = time.monotonic()
        window = self.window
        kept = window.referenced(hits, now, gate)
        if not kept:
            return None
        # Past the latest deadline of the evicts it guards, none of them can act any more:
        # the commit goes ahead then even if the cache never answers the keep.
        deadline = max(window.keeps[h].deadline for h in kept)
        if deadline != float("inf"):
            loop.call_later(max(0.0, deadline - now), window.release, gate, now)
        self.send_now()
        return gate, kept

    def owe(self, hashes: Iterable[str]) -> None:
        """An earlier run may have sent these evicts, their delete still pending in the
        cache, and then committed a new reference: tell the cache to keep them."""
        if self.window.owe(hashes, time.monotonic()):
            self.send_now()

    async def _loop(self) -> None:
        while not self._closing:
            timeout = None
            if self.window.keeps:
                timeout = max(0.0, self._due - time.monotonic())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass
            self._wake.clear()
            if self._closing:
                return
            try:
                await self._send_keeps()
            except Exception:  # backends must not raise; retry shortly
                log.exception("keep delivery failed unexpectedly")
                self._due = time.monotonic() + RECHECK_S

    async def _probe_keeps(self) -> None:
        """At start-up, an empty keep: does the cache honour deadlines (ascend_ext's
        memory API answers "expires": true), or know no keeps (a stock one: 404)? Learned
        now, not from the first evict's answer, so a reference right after a restart
        already knows whether waiting for a deadline protects it."""
        backend, window = self.backend, self.window
        # Until the cache answers (it may be down or hung at start-up): a reference to a
        # chunk in the window meanwhile waits for its deadline, not knowing.
        while backend.takes_keeps and not self._closing:
            if window.expires is not None or window.defers is False:
                return  # learned meanwhile from another answer
            try:
                result = await backend.keep([], window.generation())
            except Exception:  # backends must not raise; learned later then
                log.exception("keep probe failed unexpectedly")
                return
            if result.ok:
                window.expires = (result.body or {}).get("expires") is True
                return
            if result.status in (404, 405):
                window.defers = False
                return
            await asyncio.sleep(0.5)

    async def _send_keeps(self) -> None:
        """Send every keep owed in one call, on the evict pool but its own task; a failed
        call is retried, backing off, until each keep gives up (60 s)."""
        window = self.window
        if not window.keeps or time.monotonic() < self._due:
            return
        hashes = list(window.owed())
        if not self.backend.takes_keeps:
            window.kept(hashes, False, False, [], time.monotonic())
            return
        # A fresh generation: newer than every evict written so far (a chunk evicted again
        # since is no longer owed a keep), older than every later one.
        generation = window.generation()
        result = await self.backend.keep(hashes, generation)
        self.report("keep", len(hashes), result)
        supported = result.ok or result.status not in (404, 405)
        body = result.body or {}
        late = list(body.get("late") or []) if result.ok else []
        expires = body.get("expires") is True if result.ok else None
        now = time.monotonic()
        if window.kept(hashes, result.ok, supported, late, now, generation, expires):
            # The cache is down or hung: retry, backing off to once a second.
            self._failures += 1
            self._due = time.monotonic() + min(1.0, RECHECK_S * 2**self._failures)
        else:
            self._failures = 0

    async def close(self) -> None:
        """Stop the keep loop and the probe."""
        self._closing = True
        self._wake.set()
        if self._probe is not None:
            self._probe.cancel()
        if self._keeper is not None:
            try:
                await asyncio.wait_for(self._keeper, 2)
            except (TimeoutError, asyncio.CancelledError):
                self._keeper.cancel()
