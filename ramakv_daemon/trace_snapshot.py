"""Protocol 2 snapshots: frozen at one seq without copying maps, encoded in slices."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.session import Session
from ramakv_daemon.trace_protocol import MAX_MESSAGE_BYTES, PART_BYTES, PROTOCOL, encode, summary

# One slice of work between two yields to the event loop.
SLICE_SECONDS = 0.003


@dataclass(slots=True)
class FrozenSnapshot:
    """What a snapshot will say, taken with no await: Session values are immutable, so a
    list of them is the state at ``seq`` (refcounts are read live while encoding)."""

    seq: int
    epoch: str
    header: dict[str, Any]
    sessions: list[tuple[Session, Mapping[str, int]]]
    chunks: list[str]  # with a session filter: the chunks whose refcounts are sent
    counts: Mapping[str, int]


def totals(managers: Mapping[str, SessionManager]) -> dict[str, int]:
    """Sessions, distinct referenced chunks and references over every namespace (O(1))."""
    ms = managers.values()
    return {
        "sessions": sum(len(m.sessions) for m in ms),
        "chunks": sum(len(m.refcounts) for m in ms),
        "references": sum(m.refcounts.total_references() for m in ms),
    }


def held_chunks(s: Session | None) -> set[str]:
    """The chunks a session holds references on (its active map and its fork holds)."""
    if s is None:
        return set()
    out = s.held_hashes()
    for hold in s.fork_holds:
        out.update(hold)
    return out


def freeze(
    managers: Mapping[str, SessionManager], default: SessionManager, seq: int, epoch: str,
    session: str | None = None, owner: str | None = None,
) -> FrozenSnapshot:
    """The snapshot at ``seq``; with ``session`` only that session and its chunks."""
    header: dict[str, Any] = {
        "kind": "snapshot", "protocol": PROTOCOL, "seq": seq, "epoch": epoch,
        "ts": time.time(), "max_message_bytes": MAX_MESSAGE_BYTES,
        "totals": totals(managers), "session": session,
    }
    if session is not None:
        m = managers[owner] if owner is not None else default
        s = m.sessions.get(session)
        picked = [(s, m.refcounts.counts)] if s is not None else []
        chunks = sorted(held_chunks(s))
        header["totals"]["sessions"] = len(picked)
        return FrozenSnapshot(seq, epoch, header, picked, chunks, m.refcounts.counts)
    picked = []
    for m in managers.values():
        counts = m.refcounts.counts
        picked.extend((s, counts) for s in m.sessions.values())
    return FrozenSnapshot(seq, epoch, header, picked, [], default.refcounts.counts)


async def messages(frozen: FrozenSnapshot) -> AsyncIterator[str]:
    """The header, then ``snapshot_sessions`` parts of about PART_BYTES each, the last one
    saying ``"last": true``; the loop gets a turn every SLICE_SECONDS of work."""
    yield encode(frozen.header)
    base = {"kind": "snapshot_sessions", "seq": frozen.seq, "epoch": frozen.epoch}
    part: list[str] = []
    size = 0
    index = 0
    deadline = time.perf_counter() + SLICE_SECONDS
    for i, (s, counts) in enumerate(frozen.sessions):
        text = encode(summary(s, counts))
        part.append(text)
        size += len(text) + 1
        if size >= PART_BYTES:
            yield _part(base, index, part, False)
            index, part, size = index + 1, [], 0
        if i % 32 == 31 and time.perf_counter() > deadline:
            await asyncio.sleep(0)
            deadline = time.perf_counter() + SLICE_SECONDS
    refcounts: dict[str, int] = {}
    for h in frozen.chunks:  # a filtered snapshot: that session's chunks, live counts
        refcounts[h] = frozen.counts.get(h, 0)
        size += len(h) + 12
        if size >= PART_BYTES:
            yield _part(base, index, part, False, refcounts)
            index, part, size, refcounts = index + 1, [], 0, {}
    yield _part(base, index, part, True, refcounts)


def _part(base: dict[str, Any], index: int, sessions: list[str], last: bool,
          refcounts: dict[str, int] | None = None) -> str:
    """One part; session summaries are already JSON text, so they are spliced in."""
    head = encode({**base, "part": index, "last": last, "refcounts": refcounts or {}})
    return head[:-1] + ',"sessions":[' + ",".join(sessions) + "]}"
