"""The trace hub: numbered event records, a bounded replay ring and bounded subscribers."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.trace.protocol import SLOW_CLOSE_CODE, bounded, encode
from ramakv_protocol.records import RecordBody
from ramakv_protocol.wire import slow_reason

__all__ = ["SLOW_CLOSE_CODE", "Subscriber", "TraceHub", "encode"]

log = logging.getLogger("ramakv.trace")


def cut(text: Any, limit: int = 200) -> Any:
    """A client's string as kept in a trace record of a rejected request: at most
    ``limit`` characters (the ring must not keep megabytes of them)."""
    if isinstance(text, str) and len(text) > limit:
        return text[:limit] + "..."
    return text


@dataclass(eq=False)
class Subscriber:
    """One websocket listener: a bounded queue of serialized messages."""

    queue_size: int
    session: str | None = None
    # With a session filter: returns the chunks that session holds now, so that records
    # changing their refcounts (caused by other sessions) reach the subscriber too.
    chunks_of: Callable[[str], set[str]] | None = None
    queue: asyncio.Queue[str | None] = field(init=False)
    close_reason: str | None = None
    chunks: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.queue = asyncio.Queue(self.queue_size)
        self.refresh_chunks()

    def refresh_chunks(self) -> None:
        """Re-read the filtered session's chunks (its record changed them)."""
        if self.session is not None and self.chunks_of is not None:
            self.chunks = self.chunks_of(self.session)

    def wants(self, sessions: tuple[str, ...], hashes: Iterable[str] = ()) -> bool:
        """True when no filter is set or the record touches the filtered session.

        ``sessions``: the record's session_id and the sessions its delta changed;
        ``hashes``: the chunks whose refcounts it changed.
        """
        if self.session is None:
            return True
        if self.session in sessions:
            self.refresh_chunks()
            return True
        chunks = self.chunks
        return bool(chunks) and any(h in chunks for h in hashes)

    def offer(self, message: str) -> bool:
        """Queue a message; False (and the subscriber closed) when its queue is full."""
        if self.close_reason is not None:
            return False
        try:
            self.queue.put_nowait(message)
            return True
        except asyncio.QueueFull:
            self.drop(slow_reason(self.queue_size))
            return False

    def drop(self, reason: str) -> None:
        """Discard what is queued and wake the sender with the close sentinel."""
        self.close_reason = reason
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)


class TraceHub:
    """Assigns gap-free sequence numbers and fans records out without ever blocking."""

    def __init__(
        self,
        buffer_size: int = 10000,
        queue_size: int = 1000,
        buffer_bytes: int = 64 * 1024 * 1024,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        """``on_drop()``: a subscriber was dropped for falling behind (metrics)."""
        # seq restarts at 0 with the process; the epoch tells a client that its ?since=
        # belongs to an earlier run (then it gets a fresh snapshot, never a wrong replay).
        self.epoch = secrets.token_hex(8)
        self.seq = 0
        self.queue_size = queue_size
        # (seq, sessions touched, JSON text). Text, not the record: strings are not tracked
        # by the garbage collector, and 10,000 kept records of dicts and lists made its
        # older generations slow to scan (60 ms pauses, the daemon's p99 under load).
        self.ring: deque[tuple[int, tuple[str, ...], str]] = deque()
        # Bounded in records and in bytes of text: 10,000 records of 1000-hash maps were
        # ~1 GB; the oldest go first whichever bound is reached.
        self.buffer_size = max(1, buffer_size)
        self.buffer_bytes = buffer_bytes
        self.ring_bytes = 0
        self.subscribers: set[Subscriber] = set()
        self.dropped_total = 0
        self.on_drop = on_drop

    def publish(self, body: RecordBody, touched: Sequence[str] = ()) -> int:
        """Number ``body``, keep it for replay and offer it to every subscriber.
        ``touched``: sessions it concerns beyond its session_id and delta (a fork
        expiry's parents), for ?session= filtering only, never sent."""
        self.seq += 1
        record = cast(JsonObject, body)  # numbered in place: it becomes the sent record
        record["seq"] = self.seq
        record["epoch"] = self.epoch
        extra = tuple(touched)
        delta = record.get("delta", {})
        message = bounded(record)
        sid = record.get("session_id")
        changed = delta.get("sessions", ())
        sessions = (sid, *changed, *extra) if isinstance(sid, str) else (*changed, *extra)
        ring = self.ring
        ring.append((self.seq, sessions, message))
        self.ring_bytes += len(message)
        while len(ring) > self.buffer_size or (
            self.ring_bytes > self.buffer_bytes and len(ring) > 1
        ):
            self.ring_bytes -= len(ring.popleft()[2])
        if self.subscribers:
            hashes = delta.get("refcounts", ())
            for sub in list(self.subscribers):
                if sub.wants(sessions, hashes) and not sub.offer(message):
                    self._forget(sub)
        return self.seq

    def _forget(self, sub: Subscriber) -> None:
        if sub in self.subscribers:
            self.subscribers.discard(sub)
            self.dropped_total += 1
            log.warning("trace subscriber dropped: %s", sub.close_reason)
            if self.on_drop is not None:
                self.on_drop()

    def replay(self, since: int, sub: Subscriber | None = None) -> list[str] | None:
        """Messages after ``since`` (those ``sub`` wants), or None when some of them are
        no longer in the ring."""
        if since > self.seq or since < 0:
            return None
        if since == self.seq:
            return []
        if not self.ring or self.ring[0][0] > since + 1:
            return None
        return [
            text
            for seq, sessions, text in self.ring
            if seq > since and _wanted(sub, sessions, text)
        ]

    def recent(self, count: int, sub: Subscriber | None = None) -> list[str]:
        """Up to ``count`` of the newest kept records (those ``sub`` wants), oldest first."""
        out: list[str] = []
        for _seq, sessions, text in reversed(self.ring):
            if len(out) >= count:
                break
            if _wanted(sub, sessions, text):
                out.append(text)
        out.reverse()
        return out

    def subscribe(
        self,
        session: str | None = None,
        chunks_of: Callable[[str], set[str]] | None = None,
    ) -> Subscriber:
        """Register a subscriber; the caller sends its first message(s) itself."""
        sub = Subscriber(self.queue_size, session, chunks_of)
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        """Forget a subscriber that went away by itself."""
        self.subscribers.discard(sub)

    def close_all(self, reason: str) -> None:
        """Wake every sender with the close sentinel (shutdown)."""
        for sub in list(self.subscribers):
            sub.drop(reason)
        self.subscribers.clear()


def _wanted(sub: Subscriber | None, sessions: tuple[str, ...], text: str) -> bool:
    """Whether a kept record goes to ``sub``; its chunks are read only when they matter."""
    if sub is None or sub.session is None or sub.session in sessions:
        return True
    if not sub.chunks:
        return False
    delta = orjson.loads(text).get("delta") or {}
    return any(h in sub.chunks for h in delta.get("refcounts") or ())
