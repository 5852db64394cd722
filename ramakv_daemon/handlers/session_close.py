"""session_close: release the session's map, drop the row (forks stay); zeros are deleted
when the close is declared and nothing says they may be wanted, else ordered cold."""

from __future__ import annotations

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.idle_condition import FIELD, idle_for, still_idle
from ramakv_daemon.handlers.messages import as_data
from ramakv_daemon.handlers.reason import INFERRED
from ramakv_daemon.handlers.registry import Effects, HandlerContext, typed_event
from ramakv_daemon.handlers.session_suspend import Release
from ramakv_protocol.replies import SessionCloseData


class SessionClose(Release, frozen=True, tag="session_close"):
    """session_close's message."""


@typed_event(
    SessionClose,
    "Close session: release the map's references and delete the stored row. Chunks no one "
    "names any more are deleted from every tier (after the eviction deferral), except "
    "those a suspended session names or two sessions shared within retain_unreferenced_s: "
    f"those, and every chunk of a close with {INFERRED}=true (the host guessed), are only "
    "ordered cold (the retention sweep deletes them once dead past the window). Open forks "
    f"stay held until their fork_end or expiry. With {FIELD} (a wall-clock time), only a "
    "session with no event after it is closed (the idle policy's close); otherwise "
    "nothing changes",
    effects=Effects(turn=Turn.LEAVE, takes_over=True),
)
def session_close(ctx: HandlerContext, msg: SessionClose, now: float) -> Change:
    session_id, since = msg.session_id, msg.if_idle_since
    if since is None:
        change = ctx.manager.session_close(session_id, now, inferred=msg.inferred)
    else:
        session = ctx.manager.sessions.get(session_id)
        if session is None or not still_idle(session, since):
            return Change(data=as_data(SessionCloseData(evicted_count=0, closed=False)))
        change = ctx.manager.session_close(session_id, now, inferred=msg.inferred)
        change.facts.idle_s = idle_for(session, now)
    change.facts.reason = msg.reason
    return change
