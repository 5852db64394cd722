"""Carries committed prefetches and evictions to the backend, off the reply path."""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from ramakv_daemon.delivery.delivery_state import DeliveryState
from ramakv_daemon.delivery.evict_window import EvictWindow
from ramakv_daemon.ports import Backend, BackendResult, EvictMode

log = logging.getLogger("ramakv.backend")

MAX_BATCH = 1000
MAX_BACKOFF_S = 60.0
RECHECK_S = 0.05
# Prefetches are best effort: past this many in flight (a hung cache) new ones are dropped
# (counted) instead of piling up tasks and connections.
MAX_PREFETCHES_IN_FLIGHT = 64


class BackendDispatcher:
    """Delivers evictions from a durable outbox with retries; prefetches best effort.

    Evictions were written to the outbox table in the event's own commit, so none is
    lost to a crash or a backend outage. A chunk is checked again at the moment its evict
    body is written (:meth:`_sendable`): one referenced again is dropped from the outbox,
    never evicted, and one an uncommitted change touched waits until that change is
    committed or rolled back (only committed releases are deliverable). What follows the
    write is the eviction window (:class:`EvictWindow`): chunks referenced again in it get
    a ``keep`` where the cache defers deletes, and are reported either way. Delivery is
    at least once (a crash between the backend's answer and the row's deletion, or a call
    that failed after the cache acted, sends it again): a repeat removes nothing more and
    is counted. Prefetches are sent once, in the background, and not retried.
    """

    def __init__(
        self,
        backend: Backend,
        state: DeliveryState,
        on_result: Callable[[str, int, BackendResult], None] | None = None,
        on_failure: Callable[[str, int, BackendResult, int], None] | None = None,
        base_backoff_s: float = 0.5,
        namespace: str = "",
        defer_s: float = 0.0,
        on_window: Callable[[str, list[str], float], None] | None = None,
    ) -> None:
        self.namespace = namespace  # one dispatcher per namespace, with its own backend
        self.backend = backend
        # The namespace's live references and the commits in doubt (delivery_state).
        self.state = state
        self.on_result = on_result
        self.on_failure = on_failure
        self.base_backoff_s = base_backoff_s
        # hash -> (mode, version, outbox row); the version tells a re-queued intent from a
        # delivered one; the row is the stored evict_log row that holds this intent.
        self.outbox: dict[str, tuple[EvictMode, int, int]] = {}
        self._row_live: dict[int, int] = {}  # row -> entries of it still waiting
        self._rows_done: list[int] = []
        # Hashes due for delivery, in order; re-checks of chunks referenced again while
        # a commit was in flight, as a heap of (not before, version, hash).
        self._ready: dict[str, None] = {}
        self._later: list[tuple[float, int, str]] = []
        # Backoff is the backend's, not each chunk's: failures are outages, and retrying
        # every chunk on its own clock cost a 260,000-chunk backlog ~40 % of the loop.
        self._failures = 0
        self._paused_until = 0.0
        self._version = 0
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._runner: asyncio.Task[None] | None = None
        self._closing = False
        self.defer_s = min(max(defer_s, 0.0), 60.0)  # the memory API takes 0..60 s
        self.window = EvictWindow(self.defer_s, on_window)
        self.on_window = on_window
        self._repeat: set[str] = set()  # may have been delivered before (restart, failure)
        # (time, row -> entries) of deliveries a deferring cache may still act on: their
        # rows stay stored until then, so a restart meanwhile sends them again and watches
        # their window (keeps) instead of forgetting a delete still pending in the cache.
        self._settling: deque[tuple[float, dict[int, int]]] = deque()
        self._keep_due = 0.0
        self._keep_wake = asyncio.Event()
        self._keep_failures = 0
        self._keeper: asyncio.Task[None] | None = None
        self._probe: asyncio.Task[None] | None = None
        self._prefetching = 0
        self._drop_logged = 0.0

    # ---- feeding ---------------------------------------------------------------------
    def load(self, row_id: int, entries: Sequence[tuple[str, str]]) -> None:
        """One stored outbox row left from a previous run (rows in commit order); its
        entries are delivered again if still unreferenced."""
        delete = [h for h, m in entries if m == EvictMode.DELETE.value]
        demote = [h for h, m in entries if m == EvictMode.DEMOTE.value]
        self._repeat.update(delete)
        self._repeat.update(demote)
        # Its delete may still be pending in the cache: a reference before the re-send
        # must get a keep before its commit, not after (a restart inside the deferral).
        self.window.loaded(delete + demote, time.monotonic())
        self.evictions_committed(delete, demote, row_id)
        if not (delete or demote):
            self._rows_done.append(row_id)
        self._flush_rows()

    def _release_row(self, row: int, entries: int = 1) -> None:
        left = self._row_live.get(row, 0) - entries
        if left > 0:
            self._row_live[row] = left
        else:
            self._row_live.pop(row, None)
            self._rows_done.append(row)

    def _flush_rows(self) -> None:
        if self._rows_done:
            self.state.forget_rows(self._rows_done)
            self._rows_done = []

    def evictions_committed(self, delete: list[str], demote: list[str], row: int = 0) -> None:
        """Queue evictions whose outbox row ``row`` is durable now (hot path: kept inline)."""
        if not (delete or demote):
            return
        outbox, v = self.outbox, self._version
        ready = self._ready
        replaced: list[int] = []
        for mode, hashes in ((EvictMode.DELETE, delete), (EvictMode.DEMOTE, demote)):
            for h in hashes:
                v += 1
                old = outbox.get(h)
                if old is not None:  # the older intent's row no longer needs this entry
                    replaced.append(old[2])
                outbox[h] = (mode, v, row)
                ready[h] = None
        self._version = v
        self._row_live[row] = self._row_live.get(row, 0) + len(delete) + len(demote)
        for old_row in replaced:
            self._release_row(old_row)
        self._flush_rows()
        self._wake.set()

    def prefetch(self, session_id: str | None, hashes: list[str]) -> None:
        """Send one prefetch in the background."""
        if not hashes:
            return
        if self._prefetching >= MAX_PREFETCHES_IN_FLIGHT:
            dropped = BackendResult(
                False, 0, f"dropped: {MAX_PREFETCHES_IN_FLIGHT} prefetches still in flight"
            )
            if self.on_result is not None:
                self.on_result("prefetch", len(hashes), dropped)
            now = time.monotonic()
            if now - self._drop_logged >= 10.0:  # one line per 10 s, not one per event
                self._drop_logged = now
                log.warning("prefetch of %d chunks %s", len(hashes), dropped.detail)
            return
        self._prefetching += 1
        task = asyncio.get_running_loop().create_task(self._prefetch(session_id, hashes))
        self._tasks.add(task)
        task.add_done_callback(self._prefetch_done)

    def _prefetch_done(self, task: asyncio.Task[None]) -> None:
        self._prefetching -= 1
        self._tasks.discard(task)

    def demote(self, hashes: list[str]) -> None:
        """Budget demotion of still-referenced chunks (DDR -> disk), best effort.

        Not in the outbox: losing one to a crash only leaves a chunk in DDR, and the
        outbox's re-check would (rightly) drop an eviction of a referenced chunk.
        """
        if not hashes:
            return
        task = asyncio.get_running_loop().create_task(self._demote(hashes))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _demote(self, hashes: list[str]) -> None:
        for i in range(0, len(hashes), MAX_BATCH):
            part = hashes[i : i + MAX_BATCH]
            result = await self.backend.evict(part, EvictMode.DEMOTE)
            self._report("budget_demote", len(part), result)

    async def _prefetch(self, session_id: str | None, hashes: list[str]) -> None:
        for i in range(0, len(hashes), MAX_BATCH):
            part = hashes[i : i + MAX_BATCH]
            result = await self.backend.prefetch(part, f"prefetch_{session_id}")
            self._report("prefetch", len(part), result)

    # ---- delivery loop ---------------------------------------------------------------
    def start(self) -> None:
        """Start the delivery loop."""
        loop = asyncio.get_running_loop()
        self._runner = loop.create_task(self._run(), name="evict-outbox")
        self._keeper = loop.create_task(self._keep_loop(), name="evict-keeps")
        if self.defer_s > 0:  # its own task: a hung cache must not hold the keeps back
            self._probe = loop.create_task(self._probe_keeps(), name="keep-probe")
        self._wake.set()

    @property
    def backlog(self) -> int:
        """Evictions not yet confirmed by the backend."""
        return len(self.outbox)

    async def _run(self) -> None:
        while not self._closing:
            timeout = self._next_due_in()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass
            self._wake.clear()
            if self._closing:
                return
            try:
                await self._deliver_due()
            except Exception:  # noqa: BLE001 - backends must not raise; if one does, back off
                log.exception("eviction delivery failed unexpectedly; retrying after backoff")
                self._back_off()

    def _back_off(self) -> None:
        """One more failure in a row: pause every delivery to the backend for longer."""
        self._failures += 1
        backoff = min(MAX_BACKOFF_S, self.base_backoff_s * 2 ** (self._failures - 1))
        self._paused_until = time.monotonic() + backoff

    def _next_due_in(self) -> float | None:
        now = time.monotonic()
        waits = []
        if self._ready:
            waits.append(self._paused_until - now)
        if self._settling:
            waits.append(self._settling[0][0] - now)
        if self._later:
            # The heap may hold stale entries (delivered or re-queued since): waking for
            # one early only costs a pop.
            waits.append(self._later[0][0] - now)
        return max(0.0, min(waits)) if waits else None

    def _promote(self, now: float) -> None:
        """Move entries whose wait is over from the heap to the ready set."""
        later, outbox, ready = self._later, self.outbox, self._ready
        while later and later[0][0] <= now:
            _, version, h = heapq.heappop(later)
            entry = outbox.get(h)
            if entry is not None and entry[1] == version:
                ready[h] = None

    def _wait(self, h: str, until: float) -> None:
        entry = self.outbox.get(h)
        if entry is not None:
            heapq.heappush(self._later, (until, entry[1], h))

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
        self._keep_due = 0.0
        self._keep_wake.set()
        return gate, kept

    def rolled_back(self, kept: list[str]) -> None:
        """The change that got these chunks kept was rolled back: those unreferenced now
        were kept in the cache for nothing, so evict them again (best effort: no stored
        row; a crash before it leaves them to the cache's own LRU)."""
        refs, parked = self.state.references(), self.state.parked()
        free = [h for h in kept if h not in refs]
        if free:
            self.evictions_committed(
                [h for h in free if h not in parked], [h for h in free if h in parked], 0
            )

    async def _keep_loop(self) -> None:
        """Its own task: a keep must get through while an evict call is still out (a commit
        is waiting for its answer)."""
        while not self._closing:
            timeout = None
            if self.window.keeps:
                timeout = max(0.0, self._keep_due - time.monotonic())
            try:
                await asyncio.wait_for(self._keep_wake.wait(), timeout)
            except TimeoutError:
                pass
            self._keep_wake.clear()
            if self._closing:
                return
            try:
                await self._send_keeps()
            except Exception:  # noqa: BLE001 - backends must not raise; retry shortly
                log.exception("keep delivery failed unexpectedly")
                self._keep_due = time.monotonic() + RECHECK_S

    async def _probe_keeps(self) -> None:
        """At start-up, an empty keep: does the cache honour deadlines (ascend_ext's
        memory API answers "expires": true), or know no keeps (a stock one: 404)? Learned
        now, not from the first evict's answer, so a reference right after a restart
        already knows whether waiting for a deadline protects it."""
        keep = getattr(self.backend, "keep", None)
        window = self.window
        # Until the cache answers (it may be down or hung at start-up): a reference to a
        # chunk in the window meanwhile waits for its deadline, not knowing.
        while keep is not None and not self._closing:
            if window.expires is not None or window.defers is False:
                return  # learned meanwhile from another answer
            try:
                result = await keep([], window.generation())
            except Exception:  # noqa: BLE001 - backends must not raise; learned later then
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
        if not window.keeps or time.monotonic() < self._keep_due:
            return
        hashes = list(window.owed())
        keep = getattr(self.backend, "keep", None)
        if keep is None:
            window.kept(hashes, False, False, [], time.monotonic())
            return
        # A fresh generation: newer than every evict written so far (a chunk evicted again
        # since is no longer owed a keep), older than every later one.
        generation = window.generation()
        result = await keep(hashes, generation)
        self._report("keep", len(hashes), result)
        supported = result.ok or result.status not in (404, 405)
        body = result.body or {}
        late = list(body.get("late") or []) if result.ok else []
        expires = body.get("expires") is True if result.ok else None
        now = time.monotonic()
        if window.kept(hashes, result.ok, supported, late, now, generation, expires):
            # The cache is down or hung: retry, backing off to once a second.
            self._keep_failures += 1
            self._keep_due = time.monotonic() + min(1.0, RECHECK_S * 2**self._keep_failures)
        else:
            self._keep_failures = 0

    def _settle(self, now: float) -> None:
        """Release the rows of deliveries whose deferral is over."""
        settling = self._settling
        while settling and settling[0][0] <= now:
            for row, k in settling.popleft()[1].items():
                self._release_row(row, k)
        self._flush_rows()

    async def _deliver_due(self) -> None:
        now = time.monotonic()
        self._settle(now)
        self._promote(now)
        if not self._ready or now < self._paused_until:
            return
        outbox = self.outbox
        due = [h for h in self._ready if h in outbox]
        self._ready = {}
        deleting = EvictMode.DELETE
        batches = [
            (hashes[i : i + MAX_BATCH], mode)
            for hashes, mode in (
                ([h for h in due if outbox[h][0] is deleting], EvictMode.DELETE),
                ([h for h in due if outbox[h][0] is not deleting], EvictMode.DEMOTE),
            )
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
                delivered = await self._deliver(part, mode)
            except BaseException:
                # Cancelled (shutdown) with batches unsent: they stay due for drain().
                self._requeue((b for b, _ in batches[n:]), [])
                raise
            if not delivered:
                # The rest waits out the backoff ahead of what arrived meanwhile; the failed
                # batch goes last, so one the backend always refuses cannot hold back others.
                self._requeue((b for b, _ in batches[n + 1 :]), part)
                return

    def _sendable(self, batch: list[str], mode: EvictMode) -> list[str]:
        """The hashes of ``batch`` still queued in ``mode`` and still unreferenced.

        One referenced again is forgotten, or, while a commit is in flight (the new
        reference may yet be rolled back), looked at again shortly.
        """
        outbox = self.outbox
        part = [h for h in batch if (e := outbox.get(h)) is not None and e[0] is mode]
        refs = self.state.references()
        # Only a committed release is deliverable: a chunk an uncommitted change moved may
        # end up referenced (that change commits) or back where it was (it is rolled back).
        doubt = self.state.in_doubt(part)
        again = [h for h in part if h in refs and h not in doubt]
        if again:
            repeat = self._repeat
            if repeat and self.window.owe((h for h in again if h in repeat), time.monotonic()):
                # An earlier run may have sent this evict, its delete still pending in the
                # cache, and then committed the new reference: tell the cache to keep it.
                self._keep_due = 0.0
                self._keep_wake.set()
            self._forget_all(again)
            self._flush_rows()
        if doubt:
            recheck = time.monotonic() + RECHECK_S
            for h in doubt:
                self._wait(h, recheck)
        if not (again or doubt):
            return part
        return [h for h in part if h not in refs and h not in doubt]

    def _requeue(self, first: Iterable[list[str]], last: list[str]) -> None:
        """Due again: ``first`` ahead of the intents queued meanwhile, ``last`` behind."""
        outbox = self.outbox
        ahead = {h: None for batch in first for h in batch if h in outbox}
        self._ready = {**ahead, **self._ready, **{h: None for h in last if h in outbox}}

    async def _deliver(self, hashes: list[str], mode: EvictMode) -> bool:
        """One evict call, its hashes checked once more as the body is written; True when
        the backend took it (or nothing was left to send)."""
        outbox, window = self.outbox, self.window
        entries: dict[str, tuple[EvictMode, int, int]] = {}
        # The generation is taken at the write too: a keep sent while this call waited for
        # its connection is older, so it cannot make the cache refuse this evict as stale.
        extra: dict = {"defer_s": self.defer_s} if self.defer_s > 0 else {}

        def at_write(batch: list[str]) -> list[str]:
            part = self._sendable(batch, mode)
            for h in part:
                entries[h] = outbox[h]
            gen = window.generation()
            if extra:
                extra["generation"] = gen
                extra["not_after_ns"] = window.not_after(gen)
            window.wrote(part, gen, time.monotonic())
            return part

        checked = getattr(self.backend, "evict_checked", None)
        if checked is not None:
            result, sent, wrote_at = await checked(hashes, mode, at_write, extra or None)
        else:
            sent = at_write(hashes)
            wrote_at = time.monotonic()
            result = await self.backend.evict(sent, mode) if sent else BackendResult(True)
        answered_at = time.monotonic()
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
            self._report(op, count, result)
        if sent:
            if self.on_window is not None:
                self.on_window("answered", sent, answered_at - wrote_at)
        repeated = [h for h in sent if h in self._repeat]
        if result.ok:
            if repeated:
                self._repeat.difference_update(repeated)
                if self.on_window is not None:
                    self.on_window("repeated", repeated, 0.0)
            # An entry replaced while the call was out is a newer intent: it stays queued.
            self._forget_all(
                [h for h in sent if outbox.get(h) is entries[h]],
                # Kept stored past the evict's deadline too: a restart before it must
                # still watch the chunk (its delete may yet act until then).
                max(answered_at + self.defer_s + window.grace(), window.deadline_from(wrote_at))
                if deferred
                else None,
            )
            self._flush_rows()
            self._failures, self._paused_until = 0, 0.0
            return True
        # The cache may have acted before the failure (a timeout): the next try may repeat.
        self._repeat.update(sent)
        self._back_off()
        if self.on_failure is not None:
            self.on_failure(op, count, result, self.backlog)
        return False

    def _forget_all(self, hashes: list[str], settle_at: float | None = None) -> None:
        """Drop delivered (or re-referenced) entries; release their rows in one count each
        (at ``settle_at`` when the cache may still act on them until then)."""
        pop = self.outbox.pop
        rows: dict[int, int] = {}
        if self._repeat:
            self._repeat.difference_update(hashes)
        for h in hashes:
            entry = pop(h, None)
            if entry is not None:
                rows[entry[2]] = rows.get(entry[2], 0) + 1
        if settle_at is not None and rows:
            self._settling.append((settle_at, rows))
            self._wake.set()
            return
        for row, k in rows.items():
            self._release_row(row, k)

    def _report(self, op: str, count: int, result: BackendResult) -> None:
        if not result.ok:
            log.warning(
                "backend %s of %d chunks failed: status=%s %s (eviction backlog %d)",
                op,
                count,
                result.status,
                result.detail,
                self.backlog,
            )
        if self.on_result is not None:
            self.on_result(op, count, result)

    def poke(self) -> None:
        """Retry everything now (operator action, tests)."""
        self._promote(float("inf"))
        self._paused_until = 0.0
        self._wake.set()

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait for in-flight prefetches and one delivery round (shutdown, tests)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
        if self.outbox:
            try:
                await asyncio.wait_for(self._deliver_due(), timeout)
            except TimeoutError:
                log.warning("shutdown: %d evictions still queued in the outbox", self.backlog)

    async def close(self) -> None:
        """Stop the delivery loop (queued evictions stay in the outbox table)."""
        self._closing = True
        self._wake.set()
        self._keep_wake.set()
        if self._probe is not None:
            self._probe.cancel()
        if self._keeper is not None:
            try:
                await asyncio.wait_for(self._keeper, 2)
            except (TimeoutError, asyncio.CancelledError):
                self._keeper.cancel()
        if self._runner is not None:
            try:
                await asyncio.wait_for(self._runner, 2)
            except (TimeoutError, asyncio.CancelledError):
                self._runner.cancel()
