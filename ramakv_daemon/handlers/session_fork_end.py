"""session_fork_end: release the newest fork's snapshot and delete zeros."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.registry import HandlerContext, event


@event(
    "session_fork_end",
    "Fork end: release the newest fork's snapshot (taken at fork time), evict chunks whose "
    "refcount reaches 0",
    required=("session_id",),
)
def session_fork_end(ctx: HandlerContext, payload: dict, now: float) -> Change:
    return ctx.manager.session_fork_end(session_id_of(payload), now)
