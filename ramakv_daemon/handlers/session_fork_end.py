"""session_fork_end: release one fork's snapshot (by fork_id, else the newest); delete zeros."""

from __future__ import annotations

from typing import Self

from ramakv_daemon.core.catalogue import JsonObject, Limits, session_id_of, session_id_value
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.handlers.messages import Message
from ramakv_daemon.handlers.registry import Effects, HandlerContext, typed_event


def fork_id_of(payload: JsonObject) -> int | None:
    """The optional ``fork_id``: a positive integer, or None when absent or null."""
    return fork_id_value(payload.get("fork_id"))


def fork_id_value(value: object) -> int | None:
    """``value`` as a ``fork_id`` (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidEvent("'fork_id' must be a positive integer")
    return value


class SessionForkEnd(Message, frozen=True, tag="session_fork_end"):
    """session_fork_end's message: no ``fork_id`` ends the session's newest open fork."""

    session_id: str
    fork_id: int | None = None

    def check(self, limits: Limits) -> None:
        session_id_value(self.session_id)
        fork_id_value(self.fork_id)

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        session_id = session_id_of(payload)
        return cls(session_id, fork_id_of(payload))


@typed_event(
    SessionForkEnd,
    "Fork end: release the snapshot of fork_id (else the session's newest open fork), "
    "taken at fork time, evict chunks whose refcount reaches 0. A fork_id already released "
    "or unknown answers fork_end=false and changes nothing. Works after the parent's close",
    # On a shared store the fork's hold lives with its parent session: a fork_end reaching
    # a node the session is not on takes the session (and its forks) over to end it here.
    effects=Effects(takes_over=True),
)
def session_fork_end(ctx: HandlerContext, msg: SessionForkEnd, now: float) -> Change:
    return ctx.manager.session_fork_end(msg.session_id, msg.fork_id, now)
