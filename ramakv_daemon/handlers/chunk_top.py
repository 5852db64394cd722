"""chunk_top (admin): the most referenced chunks, paged, optionally by hash prefix."""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Sequence
from typing import Self

from ramakv_daemon.core.catalogue import JsonObject, Limits
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.handlers.list_sessions import int_field, int_value
from ramakv_daemon.handlers.messages import Message, as_data
from ramakv_daemon.handlers.registry import HandlerContext, typed_query
from ramakv_daemon.ports import Backend
from ramakv_protocol.replies import ChunkTopData, TopChunk

MAX_LIMIT = 500
MAX_OFFSET = 100_000
MAX_COUNTED = 1_000_000  # a prefix matching more is reported as "at least"
SLICE_SECONDS = 0.003
MAX_PREFIX = 100
PREFIX_ERROR = f"'prefix' must be a string of at most {MAX_PREFIX} characters"


class _Worse(str):
    """A hash ordered backwards, so that a min-heap of (refcount, hash) drops the larger
    hash of two equal counts first (the page is refcount desc, then hash asc)."""

    __slots__ = ()

    def __lt__(self, other: str) -> bool:
        return str.__gt__(self, other)


class ChunkTop(Message, frozen=True, tag="chunk_top"):
    """chunk_top's message (a falsy ``prefix`` of any type reads as none, as it always did:
    the fast decode refuses a non-string, today's checks answer it)."""

    limit: int = 100
    offset: int = 0
    prefix: str = ""

    def check(self, limits: Limits) -> None:
        int_value(self.limit, "limit", MAX_LIMIT)
        int_value(self.offset, "offset", MAX_OFFSET)
        if len(self.prefix) > MAX_PREFIX:
            raise InvalidEvent(PREFIX_ERROR)

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        limit = int_field(payload, "limit", 100, MAX_LIMIT)
        offset = int_field(payload, "offset", 0, MAX_OFFSET)
        prefix = payload.get("prefix") or ""
        if not isinstance(prefix, str) or len(prefix) > MAX_PREFIX:
            raise InvalidEvent(PREFIX_ERROR)
        return cls(limit, offset, prefix)


@typed_query(
    ChunkTop,
    "Admin: referenced chunks by refcount (highest first, then hash), paged with offset "
    "and limit (up to 500); 'prefix' keeps the hashes starting with it",
)
async def chunk_top(ctx: HandlerContext, msg: ChunkTop, backend: Backend) -> Change:
    offset, prefix = msg.offset, msg.prefix
    rows, total, exact = await top(ctx, offset + msg.limit, prefix)
    page = rows[offset:]
    chunks: list[TopChunk] = [{"hash": h, "refcount": n} for n, h in page]
    data: ChunkTopData = {
        "total": total,
        "total_exact": exact,
        "offset": offset,
        "prefix": prefix,
        "chunks": chunks,
    }
    return Change(data=as_data(data))


async def top(ctx: HandlerContext, k: int, prefix: str) -> tuple[list[tuple[int, str]], int, bool]:
    """The ``k`` best (refcount, hash) pairs, the number of matching chunks, and whether
    that number is exact.

    The refcount table cannot be iterated across awaits (it changes size), so the scan
    walks a list of the active maps and fork holds (immutable tuples) in slices of a few
    milliseconds; counts are read live. A chunk listed by many sessions is seen many
    times; the heap's member set keeps it from being taken twice.
    """
    m = ctx.manager
    counts = m.refcounts.counts
    if not prefix and len(counts) == 0:
        return [], 0, True
    # Open forks hold references too (also those of closed parents): scanned as lists.
    sources: list[Sequence[str]] = [s.chunk_hashes for s in m.sessions.values() if not s.suspended]
    sources.extend(f.hashes for f in m.forks.values())
    heap: list[tuple[int, _Worse]] = []
    members: set[str] = set()
    matched: set[str] | None = set() if prefix else None
    deadline = time.perf_counter() + SLICE_SECONDS
    for i, hashes in enumerate(sources):
        for h in hashes:
            if prefix and not h.startswith(prefix):
                continue
            n = counts.get(h, 0)
            if not n:
                continue
            if matched is not None and len(matched) < MAX_COUNTED:
                matched.add(h)
            if h in members:
                continue
            if len(heap) < k:
                heapq.heappush(heap, (n, _Worse(h)))
                members.add(h)
            elif n >= heap[0][0] and heap[0] < (n, _Worse(h)):
                _, gone = heapq.heapreplace(heap, (n, _Worse(h)))
                members.discard(gone)
                members.add(h)
        if i % 16 == 15 and time.perf_counter() > deadline:
            await asyncio.sleep(0)
            deadline = time.perf_counter() + SLICE_SECONDS
    rows = sorted(((n, str(h)) for n, h in heap), key=lambda r: (-r[0], r[1]))
    if matched is None:
        return rows, len(counts), True
    return rows, len(matched), len(matched) < MAX_COUNTED
