"""session_chunks (admin): one page of a session's ordered map with each chunk's refcount."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.list_sessions import int_field
from ramakv_daemon.handlers.registry import HandlerContext, event

MAX_LIMIT = 1000


@event(
    "session_chunks",
    "Admin: one page of a session's chunk map in order (offset, limit up to 1000), each "
    "chunk with its global refcount and how many references others hold on it; "
    "forks=true adds the open forks with their hashes; a closed parent with open forks "
    "answers state 'closed' and no map",
    required=("session_id",),
    optional=("offset", "limit", "forks"),
)
def session_chunks(ctx: HandlerContext, payload: dict, now: float) -> Change:
    sid = session_id_of(payload)
    limit = int_field(payload, "limit", 200, MAX_LIMIT)
    offset = int_field(payload, "offset", 0, 2**31)
    with_forks = payload.get("forks", False)
    if not isinstance(with_forks, bool):
        raise InvalidEvent("'forks' must be true or false")
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
    rows = []
    for i, h in enumerate(page, start=offset):
        n = counts.get(h, 0)
        rows.append({"pos": i, "hash": h, "refcount": n, "others": max(n - own[h], 0)})
    data: dict[str, object] = {
        "session_id": sid,
        "state": s.state if s is not None else "closed",
        "turn_count": s.turn_count if s is not None else 0,
        "total": len(hashes),
        "offset": offset,
        "chunks": rows,
    }
    if with_forks:
        data["fork_holds"] = [list(f.hashes) for f in forks]
        data["forks"] = [{**f.summary(), "chunk_hashes": list(f.hashes)} for f in forks]
    return Change(data=data)
