"""session_chunks (admin): one page of a session's ordered map with each chunk's refcount."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.list_sessions import int_field
from ramakv_daemon.handlers.registry import HandlerContext, event

MAX_LIMIT = 1000


@event(
    "session_chunks",
    "Admin: one page of a session's chunk map in order (offset, limit up to 1000), each "
    "chunk with its global refcount and how many references others hold on it",
    required=("session_id",),
    optional=("offset", "limit"),
)
def session_chunks(ctx: HandlerContext, payload: dict, now: float) -> Change:
    sid = session_id_of(payload)
    limit = int_field(payload, "limit", 200, MAX_LIMIT)
    offset = int_field(payload, "offset", 0, 2**31)
    s = ctx.manager.get(sid)
    counts = ctx.manager.refcounts.counts
    page = s.chunk_hashes[offset : offset + limit]
    own = dict.fromkeys(page, 0 if s.suspended else 1)
    for hold in s.fork_holds:
        for h in hold:
            if h in own:
                own[h] += 1
    rows = []
    for i, h in enumerate(page, start=offset):
        n = counts.get(h, 0)
        rows.append({"pos": i, "hash": h, "refcount": n, "others": max(n - own[h], 0)})
    return Change(data={
        "session_id": sid, "state": s.state, "total": len(s.chunk_hashes),
        "offset": offset, "chunks": rows,
    })
