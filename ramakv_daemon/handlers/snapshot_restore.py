"""snapshot_restore: re-reference a stored map (own or a source session's) and prefetch it."""

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import optional_session_id, session_id_of
from ramakv_daemon.handlers.reason import reason_of
from ramakv_daemon.handlers.registry import Effects, HandlerContext, event
from ramakv_daemon.handlers.request_id import request_id_of


@event(
    "snapshot_restore",
    "Restore session snapshot: load chunk_hashes from the session (or source_session_id), "
    "register references + prefetch",
    required=("session_id",),
    optional=("source_session_id", "reason", "request_id"),
    effects=Effects(turn=Turn.FINISH, grows=True, takes_over=True),
)
def snapshot_restore(ctx: HandlerContext, payload: dict, now: float) -> Change:
    session_id = session_id_of(payload)
    source = optional_session_id(payload, "source_session_id")
    reason = reason_of(payload)
    request_id = request_id_of(payload)
    change = ctx.manager.snapshot_restore(session_id, source, now)
    change.facts.reason = reason
    change.facts.request_id = request_id
    return change
