"""Best-effort calls off the reply path: prefetches (limited in flight, dropped once their
request was served) and budget demotions."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass

from ramakv_daemon.ports import Backend, BackendResult, EvictMode

log = logging.getLogger("ramakv.backend")

MAX_BATCH = 1000
# Prefetches are best effort: past this many in flight (a hung cache) new ones are dropped
# (counted) instead of piling up tasks and connections.
MAX_PREFETCHES_IN_FLIGHT = 64
# A cache that prefetches by token ids only (the stock LMCache server) answers a hash
# prefetch 501 Not Implemented.
HASH_PREFETCH_UNSUPPORTED = 501
# Sessions whose prefetches are remembered until their request is served; past this the
# oldest are forgotten (a session closed without a turn_end): at worst a cancel not sent.
MAX_TRACKED_SESSIONS = 4096
MAX_TRACKED_PER_SESSION = 8  # the newest ones (a session restored over and over, unserved)

Report = Callable[[str, int, BackendResult], None]
# (outcome, chunks not loaded because of it) of one prefetch dropped because its request
# was served: "unsent" (none of it reached the cache, or the cache knows no cancel: its
# parts not sent), "stopped" (the cache stopped it), "ended" (the cache had finished it:
# only parts not sent), "failed" (the cancel call failed).
CancelReport = Callable[[str, int], None]


_last_boot_ns = 0


def _boot_id() -> str:
    """This run's part of every tag, so a restarted daemon never names a prefetch as the
    last run did (a cancel of one would stop the other in the cache): the start time in ns,
    base 36, raised past the last one taken in this process (a daemon built twice in one)."""
    global _last_boot_ns
    _last_boot_ns = n = max(time.time_ns(), _last_boot_ns + 1)
    digits = ""
    while n:
        n, d = divmod(n, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[d] + digits
    return digits or "0"


@dataclass(slots=True, eq=False)
class _Sending:
    """One prefetch on its way to the cache: its tag, the request it is for, and how far
    its sending got."""

    tag: str
    chunks: int
    request_id: str | None = None  # the request of the session it is for, if named
    starts: bool = False  # a turn_start's: it begins a request (the FIFO's boundary)
    posted: int = 0  # chunks whose call went out (the cache may be loading them)
    accepted: bool = False  # the cache took a part of it
    sending: bool = True  # its task is still sending parts
    cancelled: bool = False  # its request was served: send no more, stop the cache's


class Prefetcher:
    """Sends prefetches and budget demotions once, in the background, never retried; a
    session's prefetches not needed any more (:meth:`served`) are dropped and cancelled.

    A prefetch belongs to a request of its session: the one its event's ``request_id``
    names, else the next to end. A turn_end with a request_id cancels that request's
    prefetches and the unnamed ones opened before them (a restore sent without the id);
    one without cancels the oldest request's: the prefetches up to and including the
    session's oldest pending turn_start's (all of them when none is a turn_start's). So a
    late turn_end of one request never stops the prefetch of a later one (issue 31).
    """

    def __init__(
        self,
        backend: Backend,
        report: Report,
        on_result: Callable[[str, int, BackendResult], None] | None,
        on_cancel: CancelReport | None = None,
    ) -> None:
        """``report``: each call's result (logged and counted); ``on_result``: a dropped
        prefetch's (counted, never sent); ``on_cancel``: each prefetch cancelled."""
        self.backend = backend
        self.report = report
        self.on_result = on_result
        self.on_cancel = on_cancel
        self.tasks: set[asyncio.Task[None]] = set()
        self._prefetching = 0
        self._drop_logged = 0.0
        self._seq = 0
        self.boot_id = _boot_id()  # in every tag: prefetch_<session>:<boot_id>:<n>
        # session_id -> its prefetches since its last served request, oldest session first.
        self._pending: OrderedDict[str, list[_Sending]] = OrderedDict()
        # False once the cache answered a cancel 404/405 (a stock memory API): none sent.
        self.cancels: bool | None = None
        # False once the cache answered a hash prefetch 501 (the stock server prefetches
        # token ids, which the proxy sends): no more sent, rather than an error per restore.
        self.by_hash: bool | None = None

    def prefetch(
        self,
        session_id: str | None,
        hashes: list[str],
        request_id: str | None = None,
        starts: bool = False,
    ) -> None:
        """Send one prefetch in the background, for request ``request_id`` of the session
        (``starts``: a turn_start's, remembered even when it sends nothing: it still
        begins a request, which the next turn_end without a request_id ends)."""
        if not hashes or self.by_hash is False or self._prefetching >= MAX_PREFETCHES_IN_FLIGHT:
            if hashes and self.by_hash is not False:
                self._dropped(len(hashes))
            if starts and session_id is not None:
                self._track(session_id, _Sending("", 0, request_id, True, sending=False))
            return
        self._seq += 1
        # Its own tag, unique across restarts too: a cancel of this one never stops
        # another prefetch of the session.
        tag = f"prefetch_{session_id}:{self.boot_id}:{self._seq}"
        sending = _Sending(tag, len(hashes), request_id, starts)
        if session_id is not None:
            self._track(session_id, sending)
        self._prefetching += 1
        task = self._spawn(self._prefetch(sending, hashes))
        task.add_done_callback(self._prefetch_done)

    def _dropped(self, chunks: int) -> None:
        dropped = BackendResult(
            False, 0, f"dropped: {MAX_PREFETCHES_IN_FLIGHT} prefetches still in flight"
        )
        if self.on_result is not None:
            self.on_result("prefetch", chunks, dropped)
        now = time.monotonic()
        if now - self._drop_logged >= 10.0:  # one line per 10 s, not one per event
            self._drop_logged = now
            log.warning("prefetch of %d chunks %s", chunks, dropped.detail)

    def _track(self, session_id: str, sending: _Sending) -> None:
        """Remember a prefetch until a turn_end of its request."""
        mine = self._pending.setdefault(session_id, [])
        mine.append(sending)
        del mine[:-MAX_TRACKED_PER_SESSION]
        self._pending.move_to_end(session_id)
        while len(self._pending) > MAX_TRACKED_SESSIONS:
            self._pending.popitem(last=False)

    def served(self, session_id: str, request_id: str | None = None) -> None:
        """A request of the session has been served (``request_id``, else its oldest): the
        prefetches it was for drop their parts not sent yet, and the cache is asked (once
        its calls are answered) to stop loading the rest. Never waits: the cancels go out
        in the background."""
        mine = self._pending.get(session_id)
        if not mine:
            return
        done = _of_request(mine, request_id)
        left = [s for s in mine if not s.cancelled]
        if left:
            self._pending[session_id] = left
        else:
            del self._pending[session_id]
        for sending in done:
            if sending.sending or not sending.chunks:
                continue  # its task stops before the next part and cancels what it sent
            self._spawn(self._cancel(sending))

    def _prefetch_done(self, _task: asyncio.Task[None]) -> None:
        self._prefetching -= 1

    def demote(self, hashes: list[str]) -> None:
        """Budget demotion of still-referenced chunks (DDR -> disk), best effort.

        Not in the outbox: losing one to a crash only leaves a chunk in DDR, and the
        outbox's re-check would (rightly) drop an eviction of a referenced chunk.
        """
        if hashes:
            self._spawn(self._demote(hashes))

    def _spawn(self, work: Coroutine[None, None, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _demote(self, hashes: list[str]) -> None:
        for i in range(0, len(hashes), MAX_BATCH):
            part = hashes[i : i + MAX_BATCH]
            result = await self.backend.evict(part, EvictMode.DEMOTE)
            self.report("budget_demote", len(part), result)

    async def _prefetch(self, sending: _Sending, hashes: list[str]) -> None:
        try:
            for i in range(0, len(hashes), MAX_BATCH):
                if sending.cancelled:
                    break
                part = hashes[i : i + MAX_BATCH]
                sending.posted += len(part)
                result = await self.backend.prefetch(part, sending.tag)
                if not result.ok and result.status == HASH_PREFETCH_UNSUPPORTED:
                    self.by_hash = False
                    log.info("the cache prefetches no chunk hashes (%s): none sent", result.detail)
                    break
                sending.accepted = sending.accepted or result.ok
                self.report("prefetch", len(part), result)
        finally:
            sending.sending = False
        if sending.cancelled:
            await self._cancel(sending)

    async def _cancel(self, sending: _Sending) -> None:
        """Ask the cache to stop what it took of a prefetch no longer needed; count it."""
        unsent = sending.chunks - sending.posted
        if not sending.accepted or self.cancels is False:
            # Nothing reached the cache, or it knows no cancel: only unsent parts dropped.
            if unsent:
                self._counted("unsent", unsent)
            return
        result = await self.backend.cancel_prefetch(sending.tag)
        self.report("prefetch_cancel", sending.posted, result)
        if not result.ok and result.status in (404, 405):
            self.cancels = False  # a stock memory API: no more cancels
            log.info("the cache knows no prefetch cancel (HTTP %d): none sent", result.status)
            if unsent:
                self._counted("unsent", unsent)
            return
        body = result.body or {}
        if not result.ok:
            self._counted("failed", unsent)
            return
        self.cancels = True
        if int(body.get("cancelled") or 0) > 0:
            self._counted("stopped", unsent + int(body.get("skipped") or 0))
        else:
            self._counted("ended", unsent)  # the cache had loaded it all already

    def _counted(self, outcome: str, chunks: int) -> None:
        if self.on_cancel is not None:
            self.on_cancel(outcome, chunks)

    async def drain(self, timeout: float) -> None:
        """Wait for the calls in flight (shutdown, tests)."""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout)


def _of_request(pending: list[_Sending], request_id: str | None) -> list[_Sending]:
    """The prefetches of ``pending`` (a session's, oldest first) that the end of request
    ``request_id`` (None: the oldest request) makes unneeded, each marked cancelled."""
    if request_id is None:
        cut = next((i + 1 for i, s in enumerate(pending) if s.starts), len(pending))
        done = pending[:cut]
    else:
        named = [i for i, s in enumerate(pending) if s.request_id == request_id]
        cut = named[-1] + 1 if named else len(pending)
        done = [
            s
            for i, s in enumerate(pending)
            if s.request_id == request_id or (s.request_id is None and i < cut)
        ]
    for sending in done:
        sending.cancelled = True
    return done
