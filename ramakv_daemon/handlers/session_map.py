"""session_map: the session's ordered chunk map."""

from __future__ import annotations

from typing import Self

from ramakv_daemon.core.catalogue import JsonObject, Limits, session_id_of, session_id_value
from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.messages import Message
from ramakv_daemon.handlers.registry import SESSIONS_READ, HandlerContext, typed_event


class SessionRef(Message, frozen=True):
    """An event that names one session and nothing else."""

    session_id: str

    def check(self, limits: Limits) -> None:
        session_id_value(self.session_id)

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        return cls(session_id_of(payload))


class SessionMap(SessionRef, frozen=True, tag="session_map"):
    """session_map's message."""


@typed_event(SessionMap, "Get session cache state", effects=SESSIONS_READ)
def session_map(ctx: HandlerContext, msg: SessionMap, now: float) -> Change:
    return ctx.manager.session_map(msg.session_id)
