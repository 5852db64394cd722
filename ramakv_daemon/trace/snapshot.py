"""Protocol 2 snapshots: frozen at one seq without copying maps, encoded in slices."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.session import Session
from ramakv_daemon.trace.protocol import (
    MAX_MESSAGE_BYTES,
    PART_BYTES,
    PROTOCOL,
    encode,
    summary,
)
from ramakv_daemon.trace.shared_counts import GROUP, suspended_counts
from ramakv_protocol.records import SnapshotHeader, Totals

# One slice of work between two yields to the event loop.
SLICE_SECONDS = 0.003


@dataclass(slots=True)
class Frozen:
    """One namespace as frozen: its sessions (immutable values, listed at C speed: no
    per-session work happens before the first await), its open forks by parent, and its
    live refcounts and shared chunks."""

    namespace: str
    counts: Mapping[str, int]
    sessions: list[Session]
    forks: dict[str, list[Fork]]
    shared: set[str]


@dataclass(slots=True)
class FrozenSnapshot:
    """What a snapshot will say, taken with no await: Session and Fork values are
    immutable, so lists of them are the state at ``seq`` (refcounts are read live while
    encoding)."""

    seq: int
    epoch: str
    header: SnapshotHeader
    rows: list[Frozen]
    orphan_forks: list[Fork]  # open forks of closed parents (a fork outlives its parent)
    chunks: list[str]  # with a session filter: the chunks whose refcounts are sent
    counts: Mapping[str, int]


def totals(managers: Mapping[str, SessionManager]) -> Totals:
    """Sessions, distinct referenced chunks and references over every namespace (O(1))."""
    ms = managers.values()
    return {
        "sessions": sum(len(m.sessions) for m in ms),
        "chunks": sum(len(m.refcounts) for m in ms),
        "references": sum(m.refcounts.total_references() for m in ms),
    }


def held_chunks(s: Session | None, forks: list[Fork]) -> set[str]:
    """The chunks a session holds references on (its active map and its open forks)."""
    out = s.held_hashes() if s is not None else set()
    for fork in forks:
        out.update(fork.hashes)
    return out


def freeze(
    managers: Mapping[str, SessionManager],
    default: SessionManager,
    seq: int,
    epoch: str,
    session: str | None = None,
    owner: str | None = None,
    node_id: str = "",
) -> FrozenSnapshot:
    """The snapshot at ``seq``; with ``session`` only that session and its chunks.

    ``node_id``: on a store shared by several daemons, this daemon's node (the header then
    says which node the snapshot is of); "" leaves it out.
    """
    header: SnapshotHeader = {
        "kind": "snapshot",
        "protocol": PROTOCOL,
        "seq": seq,
        "epoch": epoch,
        "ts": time.time(),
        "max_message_bytes": MAX_MESSAGE_BYTES,
        "totals": totals(managers),
        "session": session,
    }
    if node_id:
        header["node_id"] = node_id
    if session is not None:
        m = managers[owner] if owner is not None else default
        s = m.sessions.get(session)
        forks = m.forks.of(session)
        listed = [s] if s is not None else []
        rows = [
            Frozen(m.namespace, m.refcounts.counts, listed, {session: forks}, m.refcounts.shared)
        ]
        orphans = forks if s is None else []
        chunks = sorted(held_chunks(s, forks))
        header["totals"]["sessions"] = int(s is not None)
        return FrozenSnapshot(seq, epoch, header, rows, orphans, chunks, m.refcounts.counts)
    rows, orphans = [], []
    for key, m in managers.items():
        counts = m.refcounts.counts
        book = m.forks
        by_parent = {sid: book.of(sid) for sid in book.parents()}
        rows.append(Frozen(key, counts, list(m.sessions.values()), by_parent, m.refcounts.shared))
        orphans.extend(f for sid, fs in by_parent.items() if sid not in m.sessions for f in fs)
    return FrozenSnapshot(seq, epoch, header, rows, orphans, [], default.refcounts.counts)


async def messages(frozen: FrozenSnapshot) -> AsyncIterator[str]:
    """The header, then ``snapshot_sessions`` parts of about PART_BYTES each, the last one
    saying ``"last": true``; the loop gets a turn every SLICE_SECONDS of work."""
    yield encode(frozen.header)
    # A SnapshotPart whose session summaries are spliced in as JSON text (Part.encode).
    base: JsonObject = {"kind": "snapshot_sessions", "seq": frozen.seq, "epoch": frozen.epoch}
    part = Part()
    index = 0
    deadline = time.perf_counter() + SLICE_SECONDS
    none: list[Fork] = []
    for ns in frozen.rows:
        for start in range(0, len(ns.sessions), GROUP):
            group = ns.sessions[start : start + GROUP]
            # shared_count as of encoding (like the refcounts): the group's suspended
            # maps counted in one numpy pass, an active map against the small shared set
            # (about 12 us; trace.protocol.shared_count).
            known = suspended_counts(group, ns.counts, ns.forks)
            for i, s in enumerate(group):
                forks = ns.forks.get(s.session_id, none)
                text = encode(summary(s, ns.counts, forks, ns.shared, known.get(i)))
                part.add_session(text)
                if part.size >= PART_BYTES:
                    yield part.encode(base, index, False)
                    index, part = index + 1, Part()
            if time.perf_counter() > deadline:
                await asyncio.sleep(0)
                deadline = time.perf_counter() + SLICE_SECONDS
    for fork in frozen.orphan_forks:
        part.add_fork(encode(fork.summary()))
        if part.size >= PART_BYTES:
            yield part.encode(base, index, False)
            index, part = index + 1, Part()
    for h in frozen.chunks:  # a filtered snapshot: that session's chunks, live counts
        part.refcounts[h] = frozen.counts.get(h, 0)
        part.size += len(h) + 12
        if part.size >= PART_BYTES:
            yield part.encode(base, index, False)
            index, part = index + 1, Part()
    yield part.encode(base, index, True)


class Part:
    """One snapshot_sessions message being filled; summaries are JSON text already."""

    __slots__ = ("forks", "refcounts", "sessions", "size")

    def __init__(self) -> None:
        self.sessions: list[str] = []
        self.forks: list[str] = []
        self.refcounts: dict[str, int] = {}
        self.size = 0

    def add_session(self, text: str) -> None:
        self.sessions.append(text)
        self.size += len(text) + 1

    def add_fork(self, text: str) -> None:
        self.forks.append(text)
        self.size += len(text) + 1

    def encode(self, base: JsonObject, index: int, last: bool) -> str:
        """The part's JSON text (the summaries spliced in)."""
        head = encode({**base, "part": index, "last": last, "refcounts": self.refcounts})
        return (
            head[:-1]
            + ',"forks":['
            + ",".join(self.forks)
            + '],"sessions":['
            + ",".join(self.sessions)
            + "]}"
        )
