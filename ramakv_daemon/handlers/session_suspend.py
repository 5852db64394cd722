"""session_suspend: release the map's references and order zeros cold; keep the stored
row."""

from __future__ import annotations

from typing import Self

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.catalogue import JsonObject, Limits, session_id_of, session_id_value
from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.idle_condition import (
    FIELD,
    idle_for,
    idle_since_of,
    idle_since_value,
    still_idle,
)
from ramakv_daemon.handlers.messages import Message, as_data
from ramakv_daemon.handlers.reason import (
    INFERRED,
    inferred_of,
    reason_of,
    reason_value,
)
from ramakv_daemon.handlers.registry import Effects, HandlerContext, typed_event
from ramakv_protocol.replies import SessionSuspendData


class Release(Message, frozen=True):
    """The fields a suspend and a close share (``"inferred": null`` parses as false)."""

    session_id: str
    if_idle_since: float | None = None
    reason: str | None = None
    inferred: bool = False

    def check(self, limits: Limits) -> None:
        session_id_value(self.session_id)
        reason_value(self.reason)
        idle_since_value(self.if_idle_since)

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        session_id = session_id_of(payload)
        reason = reason_of(payload)
        inferred = inferred_of(payload)
        return cls(session_id, idle_since_of(payload), reason, inferred)


class SessionSuspend(Release, frozen=True, tag="session_suspend"):
    """session_suspend's message."""


@typed_event(
    SessionSuspend,
    "Suspend session: keep the stored map for snapshot_restore, release references and "
    "demote refcount==0 chunks out of DDR (kept on disk, where the disk tier's LRU has "
    f"them: a return is expected); never deleted. {INFERRED}=true says the host guessed "
    "(a run end, the idle policy): those chunks are ordered to the cold end of every "
    "tier's eviction order instead (left to the cache's own LRU where it has no order "
    "route). With "
    f"{FIELD} (a wall-clock "
    "time), only a session with no event after it is suspended and its last_event_ts is "
    "kept (the idle policy's suspend); otherwise nothing changes and suspended is false",
    effects=Effects(turn=Turn.LEAVE, takes_over=True),
)
def session_suspend(ctx: HandlerContext, msg: SessionSuspend, now: float) -> Change:
    session_id, since = msg.session_id, msg.if_idle_since
    if since is None:  # a suspend never deletes, declared or not
        change = ctx.manager.session_suspend(session_id, now, inferred=msg.inferred)
    else:
        session = ctx.manager.sessions.get(session_id)
        if session is None or session.suspended or not still_idle(session, since):
            # "suspended" says what this event did: the idle sweep counts on it.
            return Change(data=as_data(SessionSuspendData(evicted_count=0, suspended=False)))
        # Suspended "at" its own last event: a policy's suspend is not the host's activity,
        # so the session's idle close stays due when it was.
        change = ctx.manager.session_suspend(
            session_id, session.last_event_ts, inferred=msg.inferred
        )
        change.facts.idle_s = idle_for(session, now)
    change.facts.reason = msg.reason
    return change
