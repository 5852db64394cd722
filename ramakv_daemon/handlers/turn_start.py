"""turn_start: prefetch the session's chunks before inference (unless told not to)."""

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import bool_of, session_id_of
from ramakv_daemon.handlers.registry import Effects, HandlerContext, event
from ramakv_daemon.handlers.request_id import request_id_of


@event(
    "turn_start",
    "Pre-inference prefetch: daemon reads chunk_hashes from the session map and prefetches "
    "(prefetch: false marks the turn without prefetching, e.g. when nothing would wait for it; "
    "request_id: the request it begins, whose turn_end cancels its prefetch)",
    required=("session_id",),
    optional=("prefetch", "request_id"),
    effects=Effects(turn=Turn.START, grows=True, takes_over=True),
)
def turn_start(ctx: HandlerContext, payload: dict, now: float) -> Change:
    session_id = session_id_of(payload)
    prefetch = bool_of(payload, "prefetch", True)  # validated before anything applies
    request_id = request_id_of(payload)
    change = ctx.manager.turn_start(session_id, now)
    change.facts.request_id = request_id
    if not prefetch:
        # A prefetch nobody waits for races the prefill and only churns DDR (issue 23).
        change.prefetch = []
        change.data = {"prefetch_sent": False, "prefetch_count": 0}
    return change
