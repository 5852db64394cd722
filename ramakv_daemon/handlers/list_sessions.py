"""list_sessions (admin): one summary row per session, filterable and paged."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.core.manager import SessionManager
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
    "Admin: list sessions (id, state, turn_count, chunk_count, fork_holds, forks with "
    "fork_id and age_s, last_event_ts), sorted by id; a closed session with open forks is "
    "listed with state \"closed\"; every namespace unless the event names one (rows "
    "outside the unnamed default namespace carry 'namespace')",
    optional=("state", "limit", "offset"),
)
def list_sessions(ctx: HandlerContext, payload: dict, now: float) -> Change:
    state = payload.get("state")
    if state is not None and state not in ("active", "suspended", "closed"):
        raise InvalidEvent("'state' must be \"active\", \"suspended\" or \"closed\"")
    limit = int_field(payload, "limit", 1000, MAX_LIMIT)
    offset = int_field(payload, "offset", 0, 2**31)
    if payload.get("namespace") is not None:
        managers = [ctx.manager]
    else:
        managers = list(ctx.every().values())
    states: dict[str, str] = {}
    owner: dict[str, SessionManager] = {}
    for m in managers:
        for sid in m.forks.parents():  # closed parents first: a live session overrides
            states[sid], owner[sid] = "closed", m
        for sid, s in m.sessions.items():
            states[sid], owner[sid] = s.state, m
    ids = sorted(sid for sid, st in states.items() if state is None or st == state)
    rows = []
    for sid in ids[offset : offset + limit]:
        m = owner[sid]
        s = m.sessions.get(sid)
        forks = m.forks.of(sid)
        row = {
            "session_id": sid,
            "state": states[sid],
            "turn_count": s.turn_count if s else 0,
            "chunk_count": len(s.chunk_hashes) if s else 0,
            "fork_holds": len(forks),
            "forks": [
                {"fork_id": f.fork_id, "created_ts": f.created_ts,
                 "age_s": round(f.age(now), 3), "chunk_count": len(f.hashes)}
                for f in forks
            ],
            "last_event_ts": s.last_event_ts if s else 0.0,
        }
        if m.namespace:
            row["namespace"] = m.namespace
        rows.append(row)
    return Change(data={"total": len(ids), "sessions": rows})
