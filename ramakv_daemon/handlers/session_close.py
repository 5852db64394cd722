"""session_close: release the session's map, drop the row (forks stay); zeros are deleted
when the close is declared and nothing says they may be wanted, else ordered cold."""

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.idle_condition import FIELD, idle_for, idle_since_of, still_idle
from ramakv_daemon.handlers.reason import INFERRED, inferred_of, reason_of
from ramakv_daemon.handlers.registry import Effects, HandlerContext, event


@event(
    "session_close",
    "Close session: release the map's references and delete the stored row. Chunks no one "
    "names any more are deleted from every tier (after the eviction deferral), except "
    "those a suspended session names or two sessions shared within retain_unreferenced_s: "
    f"those, and every chunk of a close with {INFERRED}=true (the host guessed), are only "
    "ordered cold (the retention sweep deletes them once dead past the window). Open forks "
    f"stay held until their fork_end or expiry. With {FIELD} (a wall-clock time), only a "
    "session with no event after it is closed (the idle policy's close); otherwise "
    "nothing changes",
    required=("session_id",),
    optional=(FIELD, "reason", INFERRED),
    effects=Effects(turn=Turn.LEAVE, takes_over=True),
)
def session_close(ctx: HandlerContext, payload: dict, now: float) -> Change:
    session_id = session_id_of(payload)
    reason = reason_of(payload)
    inferred = inferred_of(payload)
    since = idle_since_of(payload)
    if since is None:
        change = ctx.manager.session_close(session_id, now, inferred=inferred)
    else:
        session = ctx.manager.sessions.get(session_id)
        if session is None or not still_idle(session, since):
            return Change(data={"evicted_count": 0, "closed": False})
        change = ctx.manager.session_close(session_id, now, inferred=inferred)
        change.facts.idle_s = idle_for(session, now)
    change.facts.reason = reason
    return change
