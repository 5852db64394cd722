"""session_fork_end: release one fork's snapshot (by fork_id, else the newest); delete zeros."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.registry import Effects, HandlerContext, event


def fork_id_of(payload: dict) -> int | None:
    """The optional ``fork_id``: a positive integer, or None when absent or null."""
    value = payload.get("fork_id")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidEvent("'fork_id' must be a positive integer")
    return value


@event(
    "session_fork_end",
    "Fork end: release the snapshot of fork_id (else the session's newest open fork), "
    "taken at fork time, evict chunks whose refcount reaches 0. A fork_id already released "
    "or unknown answers fork_end=false and changes nothing. Works after the parent's close",
    required=("session_id",),
    optional=("fork_id",),
    # On a shared store the fork's hold lives with its parent session: a fork_end reaching
    # a node the session is not on takes the session (and its forks) over to end it here.
    effects=Effects(takes_over=True),
)
def session_fork_end(ctx: HandlerContext, payload: dict, now: float) -> Change:
    session_id = session_id_of(payload)
    return ctx.manager.session_fork_end(session_id, fork_id_of(payload), now)
