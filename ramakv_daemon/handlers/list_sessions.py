"""list_sessions (admin): one summary row per session, filterable and paged."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.handlers.registry import HandlerContext, event

MAX_LIMIT = 10000


def int_field(payload: dict, name: str, default: int, maximum: int) -> int:
    value = payload.get(name, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or value > maximum:
        raise InvalidEvent(f"'{name}' must be an integer from 0 to {maximum}")
    return value


@event(
    "list_sessions",
    "Admin: list sessions (id, state, turn_count, chunk_count, fork_holds, last_event_ts), "
    "sorted by id; every namespace unless the event names one (rows outside the unnamed "
    "default namespace carry 'namespace')",
    optional=("state", "limit", "offset"),
)
def list_sessions(ctx: HandlerContext, payload: dict, now: float) -> Change:
    state = payload.get("state")
    if state is not None and state not in ("active", "suspended"):
        raise InvalidEvent("'state' must be \"active\" or \"suspended\"")
    limit = int_field(payload, "limit", 1000, MAX_LIMIT)
    offset = int_field(payload, "offset", 0, 2**31)
    if payload.get("namespace") is not None:
        sessions = ctx.manager.sessions
    else:
        sessions = {}
        for m in ctx.every().values():
            sessions.update(m.sessions)
    ids = sorted(sid for sid, s in sessions.items() if state is None or s.state == state)
    rows = []
    for sid in ids[offset : offset + limit]:
        s = sessions[sid]
        row = {
            "session_id": sid,
            "state": s.state,
            "turn_count": s.turn_count,
            "chunk_count": len(s.chunk_hashes),
            "fork_holds": len(s.fork_holds),
            "last_event_ts": s.last_event_ts,
        }
        if s.namespace:
            row["namespace"] = s.namespace
        rows.append(row)
    return Change(data={"total": len(ids), "sessions": rows})
