"""list_sessions (admin): one summary row per session, filterable and paged, in slices."""

import heapq
from collections.abc import Generator
from itertools import islice

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session
from ramakv_daemon.handlers.registry import READ, HandlerContext, event

MAX_LIMIT = 10000
SLICE = 2000  # sessions filtered, ids sorted or rows built per loop iteration


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
    'listed with state "closed"; every namespace unless the event names one (rows '
    "outside the unnamed default namespace carry 'namespace')",
    optional=("state", "limit", "offset"),
    effects=READ,
)
def list_sessions(ctx: HandlerContext, payload: dict, now: float) -> Generator[None, None, Change]:
    """A sliced read: the sessions are copied at the first step (immutable values: the
    state of that moment); filtering, sorting (runs merged lazily) and the rows follow a
    slice per loop iteration (one sort of 20k ids stalled the loop ~6 ms)."""
    state = payload.get("state")
    if state is not None and state not in ("active", "suspended", "closed"):
        raise InvalidEvent('\'state\' must be "active", "suspended" or "closed"')
    limit = int_field(payload, "limit", 1000, MAX_LIMIT)
    offset = int_field(payload, "offset", 0, 2**31)
    if payload.get("namespace") is not None:
        managers = [ctx.manager]
    else:
        managers = list(ctx.every().values())
    # The snapshot (sessions and forks are immutable values): the state of this moment.
    states: dict[str, str] = {}
    owner: dict[str, tuple[str, Session | None, list[Fork]]] = {}
    for m in managers:
        for sid in m.forks.parents():  # closed parents first: a live session overrides
            states[sid] = "closed"
            owner[sid] = (m.namespace, None, list(m.forks.of(sid)))
        forked = set(m.forks.parents())
        for sid, s in m.sessions.items():
            states[sid] = s.state
            owner[sid] = (m.namespace, s, list(m.forks.of(sid)) if sid in forked else [])
    yield
    items = list(states.items())
    runs: list[list[str]] = []
    total = 0
    for start in range(0, len(items), SLICE):
        part = items[start : start + SLICE]
        run = sorted(sid for sid, st in part if state is None or st == state)
        total += len(run)
        runs.append(run)
        yield
    rows = []
    merged = heapq.merge(*runs)
    skip = min(offset, total)
    while skip:  # skipped a slice at a time too: merging is the costly part
        step = min(skip, SLICE)
        for _ in islice(merged, step):
            pass
        skip -= step
        yield
    picked = islice(merged, limit)
    while True:
        batch = list(islice(picked, SLICE))
        for sid in batch:
            namespace, live, forks = owner[sid]
            row = {
                "session_id": sid,
                "state": states[sid],
                "turn_count": live.turn_count if live else 0,
                "chunk_count": len(live.chunk_hashes) if live else 0,
                "fork_holds": len(forks),
                "forks": [
                    {
                        "fork_id": f.fork_id,
                        "created_ts": f.created_ts,
                        "age_s": round(f.age(now), 3),
                        "chunk_count": len(f.hashes),
                    }
                    for f in forks
                ],
                "last_event_ts": live.last_event_ts if live else 0.0,
            }
            if namespace:
                row["namespace"] = namespace
            if ctx.node_id:  # a shared store: the node that owns it (this one)
                row["owner"] = ctx.node_id
            rows.append(row)
        if len(batch) < SLICE:
            break
        yield
    return Change(data={"total": total, "sessions": rows})
