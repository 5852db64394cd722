"""session_suspend: release the map's references and demote zeros; keep the stored row."""

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.reason import reason_of
from ramakv_daemon.handlers.registry import Effects, HandlerContext, event


@event(
    "session_suspend",
    "Suspend session: keep the stored map for snapshot_restore, release references and "
    "demote refcount==0 chunks out of DDR (kept on disk)",
    required=("session_id",),
    optional=("reason",),
    effects=Effects(turn=Turn.LEAVE, takes_over=True),
)
def session_suspend(ctx: HandlerContext, payload: dict, now: float) -> Change:
    reason = reason_of(payload)
    change = ctx.manager.session_suspend(session_id_of(payload), now)
    change.facts.reason = reason
    return change
