"""session_close: release the session's map, delete zeros, drop the row (forks stay)."""

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.idle_condition import FIELD, idle_for, idle_since_of, still_idle
from ramakv_daemon.handlers.reason import reason_of
from ramakv_daemon.handlers.registry import Effects, HandlerContext, event


@event(
    "session_close",
    "Close session: release the map's references, delete refcount==0 chunks from every "
    "tier, delete the stored row. Open forks stay held until their fork_end or expiry. "
    f"With {FIELD} (a wall-clock time), only a session with no event after it is closed "
    "(the idle policy's close); otherwise nothing changes",
    required=("session_id",),
    optional=(FIELD, "reason"),
    effects=Effects(turn=Turn.LEAVE, takes_over=True),
)
def session_close(ctx: HandlerContext, payload: dict, now: float) -> Change:
    session_id = session_id_of(payload)
    reason = reason_of(payload)
    since = idle_since_of(payload)
    if since is None:
        change = ctx.manager.session_close(session_id)
    else:
        session = ctx.manager.sessions.get(session_id)
        if session is None or not still_idle(session, since):
            return Change(data={"evicted_count": 0, "closed": False})
        change = ctx.manager.session_close(session_id)
        change.facts.idle_s = idle_for(session, now)
    change.facts.reason = reason
    return change
