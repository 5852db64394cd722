"""session_chunks (admin): one page of a session's ordered map with each chunk's refcount."""

from __future__ import annotations

from typing import Self

from ramakv_daemon.core.catalogue import JsonObject, Limits, session_id_of, session_id_value
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.handlers.list_sessions import MAX_OFFSET, int_field, int_value
from ramakv_daemon.handlers.messages import Message, as_data
from ramakv_daemon.handlers.registry import HandlerContext, typed_event
from ramakv_daemon.trace.protocol import fork_summary
from ramakv_protocol.records import ForkSummary
from ramakv_protocol.replies import ForkWithHashes, MapChunk, SessionChunksData

MAX_LIMIT = 1000


class SessionChunks(Message, frozen=True, tag="session_chunks"):
    """session_chunks' message (``"forks": null`` is refused, as it always was)."""

    session_id: str
    offset: int = 0
    limit: int = 200
    forks: bool = False

    def check(self, limits: Limits) -> None:
        session_id_value(self.session_id)
        int_value(self.limit, "limit", MAX_LIMIT)
        int_value(self.offset, "offset", MAX_OFFSET)

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        sid = session_id_of(payload)
        limit = int_field(payload, "limit", 200, MAX_LIMIT)
        offset = int_field(payload, "offset", 0, MAX_OFFSET)
        with_forks = payload.get("forks", False)
        if not isinstance(with_forks, bool):
            raise InvalidEvent("'forks' must be true or false")
        return cls(sid, offset, limit, with_forks)


@typed_event(
    SessionChunks,
    "Admin: one page of a session's chunk map in order (offset, limit up to 1000), each "
    "chunk with its global refcount and how many references others hold on it; "
    "forks=true adds the open forks with their hashes; a closed parent with open forks "
    "answers state 'closed' and no map",
)
def session_chunks(ctx: HandlerContext, msg: SessionChunks, now: float) -> Change:
    sid, limit, offset = msg.session_id, msg.limit, msg.offset
    m = ctx.manager
    forks = m.forks.of(sid)
    s = m.sessions.get(sid)
    if s is None and not forks:
        s = m.get(sid)  # raises: session not found
    # A closed parent with open forks has no map, only its forks (they outlive it).
    hashes = s.chunk_hashes if s is not None else ()
    counts = m.refcounts.counts
    page = hashes[offset : offset + limit]
    own = dict.fromkeys(page, 0 if s is None or s.suspended else 1)
    for fork in forks:
        for h in fork.hashes:
            if h in own:
                own[h] += 1
    rows: list[MapChunk] = []
    for i, h in enumerate(page, start=offset):
        n = counts.get(h, 0)
        rows.append({"pos": i, "hash": h, "refcount": n, "others": max(n - own[h], 0)})
    data: SessionChunksData = {
        "session_id": sid,
        "state": s.state if s is not None else "closed",
        "turn_count": s.turn_count if s is not None else 0,
        "total": len(hashes),
        "offset": offset,
        "chunks": rows,
    }
    if msg.forks:
        data["fork_holds"] = [list(f.hashes) for f in forks]
        data["forks"] = [_with_hashes(fork_summary(f), list(f.hashes)) for f in forks]
    return Change(data=as_data(data))


def _with_hashes(summary: ForkSummary, hashes: list[str]) -> ForkWithHashes:
    """A fork's summary with its hashes (the summary's keys first, as on the wire)."""
    return {**summary, "chunk_hashes": hashes}
