"""session_fork: hold a snapshot of the session's chunks for a forked sub-agent, by id."""

from __future__ import annotations

from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.registry import Effects, HandlerContext, typed_event
from ramakv_daemon.handlers.session_map import SessionRef


class SessionFork(SessionRef, frozen=True, tag="session_fork"):
    """session_fork's message."""


@typed_event(
    SessionFork,
    "Fork session: hold +1 on a snapshot of the session's unique chunk_hashes so the "
    "parent's turn_end or close cannot evict what the fork still uses; answers its fork_id. "
    "The hold lasts until its session_fork_end or fork_hold_ttl_s",
    effects=Effects(grows=True, takes_over=True, store_fork_id=True),
)
def session_fork(
    ctx: HandlerContext, msg: SessionFork, now: float, fork_id: int | None = None
) -> Change:
    """``fork_id``: the id a shared store handed out (else the daemon's own counter's)."""
    return ctx.manager.session_fork(msg.session_id, now, fork_id)
