"""session_close: release the session's map, delete zeros, drop the row (forks stay)."""

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.reason import reason_of
from ramakv_daemon.handlers.registry import Effects, HandlerContext, event


@event(
    "session_close",
    "Close session: release the map's references, delete refcount==0 chunks from every "
    "tier, delete the stored row. Open forks stay held until their fork_end or expiry",
    required=("session_id",),
    optional=("reason",),
    effects=Effects(turn=Turn.LEAVE, takes_over=True),
)
def session_close(ctx: HandlerContext, payload: dict, now: float) -> Change:
    reason = reason_of(payload)
    change = ctx.manager.session_close(session_id_of(payload))
    change.facts.reason = reason
    return change
