"""session_close: release everything the session holds, delete zeros, drop the row."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.registry import HandlerContext, event


@event(
    "session_close",
    "Close session: release references and fork holds, delete refcount==0 chunks from every "
    "tier, delete the stored row",
    required=("session_id",),
)
def session_close(ctx: HandlerContext, payload: dict, now: float) -> Change:
    return ctx.manager.session_close(session_id_of(payload))
