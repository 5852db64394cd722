"""EventSender: fire-and-forget delivery on one event loop, in order per session, bounded."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ramakv_sdk.client import AsyncClient
from ramakv_sdk.errors import DaemonUnavailable, RamAKvError
from ramakv_sdk.results import Envelope

log = logging.getLogger("ramakv_sdk")


# State-changing events: retried through a short outage, with an event_id.
RETRIED = frozenset(
    {
        "turn_end",
        "snapshot_restore",
        "session_fork",
        "session_fork_end",
        "session_suspend",
        "session_close",
    }
)


@dataclass(slots=True)
class SenderStats:
    """Counters; ``dropped_*`` events were never delivered, ``failed`` got ok:false."""

    sent: int = 0
    failed: int = 0
    dropped_unavailable: int = 0
    dropped_full: int = 0

    @property
    def dropped(self) -> int:
        return self.dropped_unavailable + self.dropped_full

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "dropped": self.dropped}


class RateLimitedLog:
    """At most one warning per key per ``interval`` seconds, with the count held back."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warn(self, key: str, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last.get(key, -1e9) < self.interval:
            self._held[key] = self._held.get(key, 0) + 1
            return
        held = self._held.pop(key, 0)
        self._last[key] = now
        suffix = f" ({held} more since the last warning)" if held else ""
        log.warning(msg + suffix, *args)


@dataclass(slots=True)
class _Barrier:
    """Placed in a session's queue; resolved when that session's drain reaches it."""

    reached: asyncio.Future[None]


# (event, the source session's barrier to wait for, where its answer goes or None).
_Item = (
    _Barrier
    | tuple[dict[str, Any], "asyncio.Future[None] | None", "asyncio.Future[Envelope | None] | None"]
)


class EventSender:
    """Sends events without ever raising into the caller; call ``submit`` on its loop.

    Events of one session go out one after another in submission order; different sessions
    go out concurrently (at most ``concurrency`` requests at once), except that an event
    with ``source_session_id`` waits for the source session's earlier events. At most
    ``max_queue`` events wait; beyond that they are dropped and counted.

    When the daemon cannot be reached, events that change state (:data:`RETRIED`) carry an
    ``event_id`` and are retried, in order, for up to ``retry_for`` seconds of outage (a
    daemon restart); ``turn_start`` hints and anything after that are dropped and counted.
    While it is down, attempts pause for a short, growing interval (up to ``max_pause``
    s), so a dead daemon costs the host next to nothing.
    """

    def __init__(
        self,
        client: AsyncClient,
        max_queue: int = 10000,
        concurrency: int = 8,
        max_pause: float = 2.0,
        retry_for: float = 5.0,
        stats: SenderStats | None = None,
    ) -> None:
        self.client = client
        self.retry_for = retry_for
        self.max_queue = max_queue
        self.max_pause = max_pause
        self.stats = stats or SenderStats()
        self.pending = 0
        self._queues: dict[str, deque[_Item]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sem = asyncio.Semaphore(concurrency)
        self._idle = asyncio.Event()
        self._idle.set()
        self._down_until = 0.0
        self._down_since: float | None = None
        self._pause = 0.0
        self._log = RateLimitedLog()

    def submit(self, event: Mapping[str, Any]) -> bool:
        """Queue one event; False when it was dropped because the queue is full."""
        return self._queue(event, None)

    def submit_wait(self, event: Mapping[str, Any]) -> asyncio.Future[Envelope | None]:
        """Queue one event in its session's order; the future gets the daemon's answer
        envelope, or None when the event was dropped (queue full, daemon unavailable) or
        could not be sent. It never raises."""
        answer: asyncio.Future[Envelope | None] = asyncio.get_running_loop().create_future()
        if not self._queue(event, answer):
            answer.set_result(None)
        return answer

    def _queue(
        self, event: Mapping[str, Any], answer: asyncio.Future[Envelope | None] | None
    ) -> bool:
        if self.pending >= self.max_queue:
            self.stats.dropped_full += 1
            self._log.warn(
                "full", "ram-a-kv SDK queue full (%d events); event dropped", self.max_queue
            )
            return False
        sid = event.get("session_id")
        key = sid if isinstance(sid, str) else ""
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            task = asyncio.get_running_loop().create_task(self._drain(key, queue))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        after: asyncio.Future[None] | None = None
        source = event.get("source_session_id")
        if isinstance(source, str) and source != key and source in self._queues:
            # A restore from another session waits for that session's queued events
            # (its turn_end or suspend must land before its map is copied).
            after = asyncio.get_running_loop().create_future()
            self._queues[source].append(_Barrier(after))
        queue.append((dict(event), after, answer))
        self.pending += 1
        self._idle.clear()
        return True

    async def _drain(self, key: str, queue: deque[_Item]) -> None:
        try:
            while queue:
                item = queue.popleft()
                if isinstance(item, _Barrier):
                    if not item.reached.done():
                        item.reached.set_result(None)
                    continue
                event, after, answer = item
                env: Envelope | None = None
                try:
                    if after is not None:
                        await after
                    env = await self._send_one(event)
                finally:
                    self.pending -= 1
                    if answer is not None and not answer.done():
                        answer.set_result(env)
        finally:
            if self._queues.get(key) is queue:
                del self._queues[key]
            if self.pending == 0:
                self._idle.set()

    async def _send_one(self, event: dict[str, Any]) -> Envelope | None:
        """Deliver one event (its answer envelope, None when it never got one); state
        changes are retried through a short outage."""
        type_ = event.get("type")
        retry = type_ in RETRIED
        if retry and "event_id" not in event:
            # One id per logical event, reused on every retry: the daemon answers a retry
            # that already landed with the first answer instead of applying it twice.
            event["event_id"] = uuid.uuid4().hex
        while True:
            now = time.monotonic()
            if now < self._down_until:
                outage = now - (self._down_since or now)
                if not retry or outage >= self.retry_for:
                    self._drop_unavailable()
                    return None
                await asyncio.sleep(min(self._down_until - now, self.retry_for - outage))
                continue
            try:
                async with self._sem:
                    env = await self.client.raw(event)
            except DaemonUnavailable as err:
                now = time.monotonic()
                if self._down_since is None:
                    self._down_since = now
                self._pause = min(self.max_pause, max(0.05, self._pause * 2))
                self._down_until = now + self._pause
                self._log.warn("down", "ram-a-kv daemon unavailable: %s", err)
                if not retry or now - self._down_since >= self.retry_for:
                    self._drop_unavailable()
                    return None
                continue
            except RamAKvError as err:
                self.stats.failed += 1
                self._log.warn("bad", "ram-a-kv event %s got a bad answer: %s", type_, err)
                return None
            except (TypeError, ValueError) as err:  # json.dumps refused the payload
                self.stats.failed += 1
                self._log.warn("json", "ram-a-kv event %s dropped: not JSON: %s", type_, err)
                return None
            except Exception:  # never let a bug here reach the host
                self.stats.failed += 1
                log.exception("ram-a-kv event %s could not be sent", type_)
                return None
            break
        self._pause = 0.0
        self._down_since = None
        self._down_until = 0.0
        if env["ok"]:
            self.stats.sent += 1
        else:
            self.stats.failed += 1
            self._log.warn(
                f"failed:{type_}", "ram-a-kv event %s failed: %s", type_, env.get("error")
            )
        return env

    def _drop_unavailable(self) -> None:
        self.stats.dropped_unavailable += 1
        self._log.warn("dropped", "ram-a-kv daemon unavailable: events dropped")

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued event was sent or dropped; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def aclose(self, timeout: float | None = 5.0) -> None:
        """Flush (bounded), cancel what is left and close the client."""
        await self.flush(timeout)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.client.aclose()
