"""Carries committed prefetches and evictions to the backend, off the reply path."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from ramakv_daemon.delivery.delivery_state import DeliveryState
from ramakv_daemon.delivery.evict_delivery import EvictDelivery
from ramakv_daemon.delivery.evict_window import EvictWindow
from ramakv_daemon.delivery.keeps import Keeps
from ramakv_daemon.delivery.outbox import Outbox
from ramakv_daemon.delivery.prefetch import CancelReport, Prefetcher
from ramakv_daemon.ports import Backend, BackendResult, EvictMode

log = logging.getLogger("ramakv.backend")


class BackendDispatcher:
    """One namespace's delivery: evictions from a durable outbox with retries; prefetches
    best effort; keeps for chunks referenced again inside their eviction window.

    Evictions were written to the outbox table in the event's own commit, so none is
    lost to a crash or a backend outage. A chunk is checked again at the moment its evict
    body is written (:class:`~ramakv_daemon.delivery.evict_delivery.EvictDelivery`): one
    referenced again is dropped from the outbox, never evicted, and one an uncommitted
    change touched waits until that change is committed or rolled back (only committed
    releases are deliverable). What follows the write is the eviction window
    (:class:`EvictWindow`): chunks referenced again in it get a ``keep``
    (:class:`~ramakv_daemon.delivery.keeps.Keeps`) where the cache defers deletes, and
    are reported either way. Delivery is at least once (a crash between the backend's
    answer and the row's deletion, or a call that failed after the cache acted, sends it
    again): a repeat removes nothing more and is counted. Prefetches are sent once, in
    the background, and not retried (:class:`~ramakv_daemon.delivery.prefetch.Prefetcher`);
    once the request a session's prefetch was for has been served (:meth:`served`), what is
    left of it is dropped and the cache asked to stop loading it.
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
        on_cancel: CancelReport | None = None,
    ) -> None:
        self.namespace = namespace  # one dispatcher per namespace, with its own backend
        self.backend = backend
        # The namespace's live references and the commits in doubt (delivery_state).
        self.state = state
        self.on_result = on_result
        self.defer_s = min(max(defer_s, 0.0), 60.0)  # the memory API takes 0..60 s
        self.window = EvictWindow(self.defer_s, on_window)
        wake = asyncio.Event()
        state.subscribe(wake)  # set when a commit leaves rows for this namespace
        self.outbox = Outbox(state.forget_rows, wake)
        self.keeps = Keeps(backend, self.window, state, self._report)
        self.prefetcher = Prefetcher(backend, self._report, on_result, on_cancel)
        self.delivery = EvictDelivery(
            backend,
            self.outbox,
            self.window,
            self.keeps,
            state,
            self._report,
            on_failure,
            on_window,
            self.defer_s,
            base_backoff_s,
        )

    # ---- feeding ---------------------------------------------------------------------
    def load(self, row_id: int, entries: Sequence[tuple[str, str]]) -> None:
        """One stored outbox row left from a previous run (rows in commit order); its
        entries are delivered again if still unreferenced."""
        self.delivery.ingest()
        delete = [h for h, m in entries if m == EvictMode.DELETE.value]
        demote = [h for h, m in entries if m == EvictMode.DEMOTE.value]
        cold = [h for h, m in entries if m == EvictMode.COLD.value]
        self.outbox.repeat.update(delete)
        self.outbox.repeat.update(demote)
        # Its delete may still be pending in the cache: a reference before the re-send
        # must get a keep before its commit, not after (a restart inside the deferral). An
        # order hint removes nothing: no window to watch.
        self.window.loaded(delete + demote, time.monotonic())
        self.outbox.add(delete, demote, row_id, cold)
        if not (delete or demote or cold):
            self.outbox.row_done(row_id)
        self.outbox.flush_rows()

    def evictions_committed(self, delete: list[str], demote: list[str], row: int = 0) -> None:
        """Queue evictions whose outbox row ``row`` is durable now (written by another
        transaction than a commit's: ownership's settled releases)."""
        self.delivery.ingest()
        self.outbox.add(delete, demote, row)

    def prefetch(
        self,
        session_id: str | None,
        hashes: list[str],
        request_id: str | None = None,
        starts: bool = False,
    ) -> None:
        """Send one prefetch in the background, for request ``request_id`` of the session
        (``starts``: a turn_start's, which begins a request)."""
        self.prefetcher.prefetch(session_id, hashes, request_id, starts)

    def served(self, session_id: str, request_id: str | None = None) -> None:
        """A request of the session was served: its prefetches still pending are dropped
        (unsent parts) and cancelled in the cache (best effort, in the background)."""
        self.prefetcher.served(session_id, request_id)

    def demote(self, hashes: list[str]) -> None:
        """Budget demotion of still-referenced chunks (DDR -> disk), best effort."""
        self.prefetcher.demote(hashes)

    def keep_for(
        self, prev_counts: dict[str, int]
    ) -> tuple[asyncio.Future[None], list[str]] | None:
        """The keep a just-applied change needs before its commit (see :class:`Keeps`)."""
        return self.keeps.keep_for(prev_counts)

    # ---- life cycle ------------------------------------------------------------------
    def start(self) -> None:
        """Start the delivery and keep loops."""
        self.delivery.start()
        self.keeps.start(probe=self.defer_s > 0)

    @property
    def backlog(self) -> int:
        """Evictions not yet confirmed by the backend."""
        self.delivery.ingest()
        return len(self.outbox)

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

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait for in-flight prefetches and one delivery round (shutdown, tests)."""
        await self.prefetcher.drain(timeout)
        await self.delivery.drain(timeout)

    async def close(self) -> None:
        """Stop the loops (queued evictions stay in the outbox table)."""
        self.delivery.stop_soon()
        await self.keeps.close()
        await self.delivery.close()
