"""session_map: the session's ordered chunk map."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.registry import READ, HandlerContext, event


@event("session_map", "Get session cache state", required=("session_id",), effects=READ)
def session_map(ctx: HandlerContext, payload: dict, now: float) -> Change:
    return ctx.manager.session_map(session_id_of(payload))
