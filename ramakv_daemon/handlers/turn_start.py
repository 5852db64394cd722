"""turn_start: prefetch the session's chunks before inference."""

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.registry import Effects, HandlerContext, event


@event(
    "turn_start",
    "Pre-inference prefetch: daemon reads chunk_hashes from the session map and prefetches",
    required=("session_id",),
    effects=Effects(turn=Turn.START, grows=True, reads=True, live_effect=True, takes_over=True),
)
def turn_start(ctx: HandlerContext, payload: dict, now: float) -> Change:
    return ctx.manager.turn_start(session_id_of(payload), now)
