"""snapshot_restore: re-reference a stored map (own or a source session's) and prefetch it."""

from __future__ import annotations

from typing import Self

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.catalogue import (
    JsonObject,
    Limits,
    optional_session_id,
    session_id_of,
    session_id_value,
)
from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.messages import Message
from ramakv_daemon.handlers.reason import reason_of, reason_value
from ramakv_daemon.handlers.registry import Effects, HandlerContext, typed_event
from ramakv_daemon.handlers.request_id import request_id_of, request_id_value

SOURCE = "source_session_id"


class SnapshotRestore(Message, frozen=True, tag="snapshot_restore"):
    """snapshot_restore's message: ``source_session_id`` restores another session's map."""

    session_id: str
    source_session_id: str | None = None
    reason: str | None = None
    request_id: str | None = None

    def check(self, limits: Limits) -> None:
        session_id_value(self.session_id)
        if self.source_session_id is not None:
            session_id_value(self.source_session_id, SOURCE)
        reason_value(self.reason)
        request_id_value(self.request_id)

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        session_id = session_id_of(payload)
        source = optional_session_id(payload, SOURCE)
        reason = reason_of(payload)
        return cls(session_id, source, reason, request_id_of(payload))


@typed_event(
    SnapshotRestore,
    "Restore session snapshot: load chunk_hashes from the session (or source_session_id), "
    "register references + prefetch",
    effects=Effects(turn=Turn.FINISH, grows=True, takes_over=True),
)
def snapshot_restore(ctx: HandlerContext, msg: SnapshotRestore, now: float) -> Change:
    change = ctx.manager.snapshot_restore(msg.session_id, msg.source_session_id, now)
    change.facts.reason = msg.reason
    change.facts.request_id = msg.request_id
    return change
